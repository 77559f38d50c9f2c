# 046_bench_pages.pl: doc/benchmarks.md and doc/benchmarks-peers.md are
# what test/bench/report/report.pl makes of their templates and the kept
# results (test/bench/results/): no number is edited by hand, and a
# template changed without writing the pages again (BENCH_ONLY=none make
# bench) fails here.  Every script of make bench has its line of
# conditions on the page, and the user docs name no commit or issue.  No
# cluster: it reads files only.
use strict;
use warnings;
use File::Temp qw(tempdir);
use Test::More;

sub slurp
{
	my ($f) = @_;
	open my $fh, '<', $f or die "$f: $!";
	local $/;
	my $c = <$fh>;
	close $fh;
	return $c;
}

sub page
{
	my ($template, $store) = @_;
	my $out = `perl test/bench/report/report.pl '$template' '$store'`;
	is($?, 0, "report.pl $template");
	return $out;
}

for my $p ([ 'benchmarks.md', 'benchmarks.md.in' ], [ 'benchmarks-peers.md', 'benchmarks-peers.md.in' ])
{
	my $made = page("test/bench/report/$p->[1]", 'test/bench/results');
	ok($made eq slurp("doc/$p->[0]"), "doc/$p->[0] is its template filled from test/bench/results/")
	  or diag(`perl test/bench/report/report.pl test/bench/report/$p->[1] test/bench/results | diff doc/$p->[0] - | head -20`);
	unlike($made, qr/\{\{/, "doc/$p->[0]: every directive filled");
}

# a result changed in a copy of the results is a different page
my $copy = tempdir(CLEANUP => 1);
system("cp test/bench/results/*.txt '$copy'/") == 0 or die "cp: $?";
my $flood = slurp("$copy/flood.txt");
$flood =~ s/^(flood RESULT flood_otp_p99_ms) .*$/$1 123456.7/m or die 'no flood_otp_p99_ms';
$flood =~ s/^META date .*$/META date 2031-01-02 03:04 UTC/m or die 'no date';
open my $fh, '>', "$copy/flood.txt" or die $!;
print $fh $flood;
close $fh;
my $made = page('test/bench/report/benchmarks.md.in', $copy);
ok($made ne slurp('doc/benchmarks.md'), 'another result makes another page');
like($made, qr/\| 123456\.7 \| < 500 \| \*\*missed\*\* \|/, 'the new value, judged against its target');
like($made, qr/^\*Measured: `flood\.sh` 2031-01-02, PostgreSQL \d+\.\d+, [^;]*; `flood_resolve\.sh` 2026-/m,
	'a table of two scripts run apart gives the conditions of each');

# every script make bench runs has its line of conditions
my ($list) = slurp('test/bench/run') =~ /^scripts=\$\{BENCH_ONLY:-([a-z0-9_ ]+)\}$/m;
ok($list, 'the run list of test/bench/run');
my $pages = slurp('test/bench/report/benchmarks.md.in') . slurp('test/bench/report/benchmarks-peers.md.in');
for my $s (split ' ', $list)
{
	like($pages, qr/\{\{run:([a-z0-9_]+,)*\Q$s\E(,[a-z0-9_]+)*\}\}/, "$s.sh has its line of conditions");
	ok(-f "test/bench/results/$s.txt", "and its kept results");
}

# user docs: behaviour and results, no commit hashes or issue numbers
for my $f ('README.md', glob('doc/*.md'))
{
	my $text = slurp($f);
	my @hits = $text =~ /(\b[Ii]ssues? #?\d+\b|\bcommit `?[0-9a-f]{7,12}\b)/g;
	is("@hits", '', "$f names no commit or issue");
}

done_testing();
