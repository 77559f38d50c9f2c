#!/usr/bin/perl
# test/bench/lib/sender_profile.pl: where a sender's CPU goes per job, from a
# perf profile of it (sender_profile.sh runs it).  Reads `perf script -F
# ip,sym,dso` on stdin (call chains, leaf first, a blank line between
# samples) and puts each sample in exactly one part, by the first rule of
# the list below that matches its chain, so that the parts add up to the
# whole.  Prints, per part, microseconds of CPU per job: samples times the
# sampling period, over the jobs sent during the profile.
#
#   perf script -F ip,sym,dso -i perf.data | sender_profile.pl HZ JOBS LABEL
#
# Frames of libcurl and libc carry no frame pointers, so a chain that
# passes through them often stops there: such a sample is put by its leaf.
use strict;
use warnings;

my ($hz, $jobs, $label) = @ARGV;
die "usage: sender_profile.pl HZ JOBS LABEL\n" unless $label && $jobs > 0;

# [part, what it is, test on the chain's frames (symbols) and leaf's DSO]
my @parts = (
	['planning', 'planning the round\'s statements', sub { $_[0]{GetCachedPlan} }],
	['claim', 'the claim statement (executing it)', sub { $_[0]{notif_sql_claim} }],
	['record', 'the record statement (executing it)', sub { $_[0]{notif_sql_record} }],
	['commit', 'the round\'s commit', sub { $_[0]{notif_commit_round} }],
	['round_other', 'the rest of the rounds (recovery, configuration, building requests)', sub { $_[0]{sender_round} }],
	['send', 'send(): the request into loopback TCP (the simulator\'s receive and wake-up included)',
	 sub { $_[0]{__send} || $_[0]{send} || $_[0]{__libc_send} }],
	['recv', 'recv(): the answers', sub { $_[0]{__libc_recv} || $_[0]{recv} || $_[0]{__recv} }],
	['epoll_ctl', 'epoll_ctl(): libcurl (un)watching sockets', sub { $_[0]{epoll_ctl} || $_[0]{__x64_sys_epoll_ctl} }],
	['poll', 'poll(): libcurl checking its sockets itself', sub { $_[0]{__poll} || $_[0]{poll} || $_[0]{__x64_sys_poll} }],
	['wait', 'the waits (epoll_wait, the latch)', sub { $_[0]{epoll_wait} || $_[0]{WaitEventSetWait} }],
	['libcurl', 'libcurl, other', sub { $_[1] =~ /libcurl/ }],
	['libc', 'libc, other (malloc, free, copies)', sub { $_[1] =~ /libc[.-]/ }],
	['kernel', 'the kernel, other (page faults, scheduling, timers)', sub { $_[1] =~ /kernel/ }],
	['postgres', 'PostgreSQL outside the rounds (interrupts, statistics, memory contexts)', sub { $_[1] =~ /postgres/ }],
	['other', 'anything else (notif_deliver.so, vdso)', sub { 1 }],
);

my (%count, $total);
my (%frames, $leaf_dso);

sub flush_sample
{
	return unless defined $leaf_dso;
	for my $p (@parts)
	{
		if ($p->[2]->(\%frames, $leaf_dso))
		{
			$count{ $p->[0] }++;
			last;
		}
	}
	$total++;
	%frames = ();
	undef $leaf_dso;
}

while (my $line = <STDIN>)
{
	chomp $line;
	if ($line =~ /^\s*$/)
	{
		flush_sample();
		next;
	}
	# "	    addr symbol+off (dso)" or "addr [unknown] (dso)"
	next unless $line =~ /^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$/;
	my ($sym, $dso) = ($1, $2);
	$sym =~ s/\+0x[0-9a-f]+$//;
	$sym =~ s/\@\@?GLIBC.*$//;
	$leaf_dso = $dso unless defined $leaf_dso;
	$frames{$sym} = 1;
}
flush_sample();
die "no samples\n" unless $total;

my $us = 1e6 / $hz / $jobs;	# microseconds per sample per job
printf "%-12s %9s  %s\n", 'part', "us/job", "($label: $jobs jobs, $total samples)";
for my $p (@parts)
{
	my $v = ($count{ $p->[0] } // 0) * $us;
	printf "%-12s %9.2f  %s\n", $p->[0], $v, $p->[1];
	print "RESULT profile_${label}_$p->[0]_us ", sprintf('%.2f', $v), "\n";
}
printf "%-12s %9.2f\n", 'total', $total * $us;
print "RESULT profile_${label}_total_us ", sprintf('%.2f', $total * $us), "\n";
