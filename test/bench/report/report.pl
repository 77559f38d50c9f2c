#!/usr/bin/perl
# test/bench/report/report.pl: fill a template (benchmarks.md.in,
# benchmarks-peers.md.in, beside this script) with the stored results of
# the benchmark scripts (test/bench/results/, one file per script, the
# last run of each: test/bench/run and make soak keep them there).  No
# number is typed in a template: every one comes from a results file.
#
#   perl test/bench/report/report.pl TEMPLATE RESULTS... > doc/benchmarks.md
#
# RESULTS: files, or folders whose *.txt files are read (in name order).
# A results file holds lines "META key value", "STATUS script rc
# [seconds]", "<script> RESULT name value" and "<script> ROW table | cell
# | ... |".  A file's META lines are the conditions of the scripts it
# holds results of (a script without them falls back to its results
# <script>_date, _cores, _cpu, _memory, _postgres, as soak.sh writes).
# Template directives:
#   {{name}}                   a RESULT's value ("not measured" when absent)
#   {{run:script[,script]}}    the conditions of those scripts' last run, one
#                              line: date, PostgreSQL, machine, size scale
#   {{meta:script:key}}        a META value of that script's run
#   {{check:name:OP:target}}   "met" / "**missed**" / "not measured" (OP: >= <= == <)
#   {{status:script}}          "ok", "**failed** (exit N)", "not present", "not run"
#   {{table:name}}             the ROW lines of that table, one per line
#   {{results:prefix}}         every RESULT whose name starts with prefix, as table rows
#   {{img:name:alt}}           ![alt](img/name.png), or a note when the chart was not drawn
use strict;
use warnings;

my ($template, @inputs) = @ARGV;
die "usage: report.pl TEMPLATE RESULTS...\n" unless $template && @inputs;
my @files;
for my $in (@inputs)
{
	if (-d $in) { push @files, sort glob("$in/*.txt"); }
	else { push @files, $in; }
}
my (%r, %status, %rows, @order, %meta);
for my $results (@files)
{
	my (%m, %scripts);
	open(my $fh, '<', $results) or die "$results: $!\n";
	while (my $line = <$fh>)
	{
		chomp $line;
		if ($line =~ /^META (\S+) (.*)$/) { $m{$1} = $2; }
		elsif ($line =~ /^STATUS (\S+) (\S+)/) { $status{$1} = $2; $scripts{$1} = 1; }
		elsif ($line =~ /^(\S+) RESULT (\S+) (.*)$/)
		{
			# (the substitution below resets $1: keep the names first)
			my ($s, $name, $v) = ($1, $2, $3);
			$scripts{$s} = 1;
			push @order, $name unless exists $r{$name};
			$v =~ s/^"(.*)"$/$1/;
			$r{$name} = $v;
		}
		elsif ($line =~ /^(\S+) ROW (\S+) (\|.*)$/) { $scripts{$1} = 1; push @{ $rows{$2} }, $3; }
	}
	close $fh;
	$meta{$_} = {%m} for keys %scripts;
}

my $imgdir = $ENV{BENCH_IMG_DIR} // 'doc/img';

sub check
{
	my ($name, $op, $target) = @_;
	return 'not measured' unless defined $r{$name} && $r{$name} =~ /^-?[0-9.]+(e[-+]?\d+)?$/i;
	my $v = $r{$name};
	my $ok = $op eq '>=' ? $v >= $target
	  : $op eq '<=' ? $v <= $target
	  : $op eq '<' ? $v < $target
	  : $op eq '==' ? $v == $target
	  : die "unknown operator $op\n";
	return $ok ? 'met' : '**missed**';
}

sub status
{
	my ($s) = @_;
	return 'not run' unless exists $status{$s};
	return 'not present in this tree' if $status{$s} eq 'absent';
	return $status{$s} eq '0' ? 'ok' : "**failed** (exit $status{$s})";
}

# one script's conditions: "2026-12-04, PostgreSQL 15.20, 2 cores (AMD EPYC), 23.5 GB, scale 1"
sub conditions
{
	my ($s) = @_;
	return undef unless $meta{$s};
	my %m = %{ $meta{$s} };
	for my $k (qw(date cores cpu memory postgres scale))
	{
		$m{$k} //= $r{"${s}_$k"};
	}
	return undef unless defined $m{date};
	(my $date = $m{date}) =~ s/ .*//;
	(my $pg = $m{postgres} // 'PostgreSQL unknown') =~ s/ \(.*\)$//;
	my $machine = defined $m{cores} ? "$m{cores} cores" : 'cores unknown';
	$machine .= " ($m{cpu})" if defined $m{cpu};
	$machine .= ", $m{memory}" if defined $m{memory};
	my $scale = $r{"${s}_scale"} // $m{scale};
	return "$date, $pg, $machine" . (defined $scale ? ", scale $scale" : '');
}

sub run
{
	my @s = split /,/, $_[0];
	my %by;
	my @keys;
	for my $s (@s)
	{
		my $c = conditions($s) // 'not measured yet';
		push @keys, $c unless exists $by{$c};
		push @{ $by{$c} }, "`$s.sh`";
	}
	return '*Measured ' . $keys[0] . '.*' if @keys == 1 && $keys[0] ne 'not measured yet';
	return '*Not measured yet.*' if @keys == 1;
	return '*Measured: ' . join('; ', map { join(', ', @{ $by{$_} }) . " $_" } @keys) . '.*';
}

sub expand
{
	my ($d) = @_;
	if ($d =~ /^run:(\S+)$/) { return run($1); }
	if ($d =~ /^meta:([^:]+):(\S+)$/) { return $meta{$1} ? $meta{$1}{$2} // 'unknown' : 'unknown'; }
	if ($d =~ /^check:([^:]+):([<>=]+):(.+)$/) { return check($1, $2, $3); }
	if ($d =~ /^status:(\S+)$/) { return status($1); }
	if ($d =~ /^table:(\S+)$/)
	{
		return join("\n", @{ $rows{$1} }) if $rows{$1};
		return '| not measured |';
	}
	if ($d =~ /^results:(\S+)$/)
	{
		my $p = $1;
		my @m = grep { index($_, $p) == 0 } @order;
		return '| not measured | |' unless @m;
		return join("\n", map { "| `$_` | $r{$_} |" } @m);
	}
	if ($d =~ /^img:([^:]+):(.+)$/)
	{
		return -s "$imgdir/$1.png" ? "![$2](img/$1.png)" : "(no chart: $2 was not measured)";
	}
	return $r{$d} // 'not measured';
}

open(my $t, '<', $template) or die "$template: $!\n";
local $/;
my $text = <$t>;
close $t;
$text =~ s/\{\{([^{}]+)\}\}/expand($1)/ge;
print $text;
