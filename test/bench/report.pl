#!/usr/bin/perl
# test/bench/report.pl: fill a template of doc/ (benchmarks.md.in,
# benchmarks-peers.md.in) with what a benchmark run printed (test/bench/run
# calls it).  No number is typed in
# the template: every one comes from the results file.
#
#   perl test/bench/report.pl doc/benchmarks.md.in RESULTS.txt [MORE.txt...] > doc/benchmarks.md
#
# Several results files are read as one, in order (test/bench/run adds
# doc/data/soak_results.txt, the last make soak's).  A results file holds lines "META key value", "STATUS script rc [seconds]",
# "<script> RESULT name value" and "<script> ROW table | cell | ... |".
# Template directives:
#   {{name}}                   a RESULT's value ("not measured" when absent)
#   {{meta:key}}               a META value
#   {{check:name:OP:target}}   "met" / "**missed**" / "not measured" (OP: >= <= == <)
#   {{status:script}}          "ok", "**failed** (exit N)", "not present", "not run"
#   {{table:name}}             the ROW lines of that table, one per line
#   {{results:prefix}}         every RESULT whose name starts with prefix, as table rows
#   {{img:name:alt}}           ![alt](img/name.png), or a note when the chart was not drawn
#
# Sections: a part of the template between the lines "<!-- section NAME -->"
# and "<!-- end section NAME -->" (kept in the output, so that the generated
# file has them too) can be taken from, or put into, a generated document:
#   report.pl --section NAME --into DOC TEMPLATE RESULTS...
#       prints DOC with its section NAME replaced by the filled template's
#       (a run of that part alone refreshes it, and leaves the rest as it was)
#   report.pl --section NAME --from DOC TEMPLATE RESULTS...
#       prints the filled template with its section NAME replaced by DOC's
#       (a run without that part keeps the section of the last run with it)
# A DOC without the section is an error for --into and left alone by --from
# (the section is then filled from RESULTS, "not measured" where absent).
use strict;
use warnings;
use Getopt::Long;

my ($section, $into, $from);
GetOptions('section=s' => \$section, 'into=s' => \$into, 'from=s' => \$from)
  or die "usage: report.pl [--section NAME --into DOC | --from DOC] TEMPLATE RESULTS...\n";
die "--into and --from need --section, and only one of them\n"
  if (defined $into || defined $from) && (!defined $section || (defined $into && defined $from));
my ($template, @results) = @ARGV;
die "usage: report.pl [--section NAME --into DOC | --from DOC] TEMPLATE RESULTS...\n" unless @results;
my (%r, %meta, %status, %rows, @order);
for my $results (@results)
{
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

# the section NAME of a text, with its marker lines: (before, section, after)
sub split_section
{
	my ($t, $name) = @_;
	my ($b, $e) = ("<!-- section $name -->\n", "<!-- end section $name -->\n");
	my $i = index($t, $b);
	my $j = $i < 0 ? -1 : index($t, $e, $i);
	return () if $j < 0;
	$j += length($e);
	return (substr($t, 0, $i), substr($t, $i, $j - $i), substr($t, $j));
}

sub slurp
{
	my ($f) = @_;
	open(my $h, '<', $f) or die "$f: $!\n";
	local $/;
	my $c = <$h>;
	close $h;
	return $c;
}

if (defined $into)
{
	my @doc = split_section(slurp($into), $section);
	my @new = split_section($text, $section);
	die "$template has no section $section\n" unless @new;
	die "$into has no section $section (run everything once to write it)\n" unless @doc;
	$text = $doc[0] . $new[1] . $doc[2];
}
elsif (defined $from)
{
	my @new = split_section($text, $section);
	die "$template has no section $section\n" unless @new;
	my @doc = -f $from ? split_section(slurp($from), $section) : ();
	$text = $new[0] . $doc[1] . $new[2] if @doc;
}
print $text;
