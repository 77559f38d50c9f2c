#!/usr/bin/perl
# test/bench/report.pl: fill the template of doc/benchmarks.md with what a
# benchmark run printed (test/bench/run calls it).  No number is typed in
# the template: every one comes from the results file.
#
#   perl test/bench/report.pl doc/benchmarks.md.in RESULTS.txt > doc/benchmarks.md
#
# The results file holds lines "META key value", "STATUS script rc [seconds]",
# "<script> RESULT name value" and "<script> ROW table | cell | ... |".
# Template directives:
#   {{name}}                   a RESULT's value ("not measured" when absent)
#   {{meta:key}}               a META value
#   {{check:name:OP:target}}   "met" / "**missed**" / "not measured" (OP: >= <= == <)
#   {{status:script}}          "ok", "**failed** (exit N)", "not present", "not run"
#   {{table:name}}             the ROW lines of that table, one per line
#   {{results:prefix}}         every RESULT whose name starts with prefix, as table rows
#   {{img:name:alt}}           ![alt](img/name.png), or a note when the chart was not drawn
use strict;
use warnings;

my ($template, $results) = @ARGV;
die "usage: report.pl TEMPLATE RESULTS\n" unless defined $results;
my (%r, %meta, %status, %rows, @order);
open(my $fh, '<', $results) or die "$results: $!\n";
while (my $line = <$fh>)
{
	chomp $line;
	if ($line =~ /^META (\S+) (.*)$/) { $meta{$1} = $2; }
	elsif ($line =~ /^STATUS (\S+) (\S+)/) { $status{$1} = $2; }
	elsif ($line =~ /^\S+ RESULT (\S+) (.*)$/)
	{
		# (the substitution below resets $1: keep the name first)
		my ($name, $v) = ($1, $2);
		push @order, $name unless exists $r{$name};
		$v =~ s/^"(.*)"$/$1/;
		$r{$name} = $v;
	}
	elsif ($line =~ /^\S+ ROW (\S+) (\|.*)$/) { push @{ $rows{$1} }, $2; }
}
close $fh;

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

sub expand
{
	my ($d) = @_;
	if ($d =~ /^meta:(\S+)$/) { return $meta{$1} // 'unknown'; }
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
		return -s "$imgdir/$1.png" ? "![$2](img/$1.png)" : "(no chart: $2 was not measured in this run)";
	}
	return $r{$d} // 'not measured';
}

open(my $t, '<', $template) or die "$template: $!\n";
local $/;
my $text = <$t>;
close $t;
$text =~ s/\{\{([^{}]+)\}\}/expand($1)/ge;
print $text;
