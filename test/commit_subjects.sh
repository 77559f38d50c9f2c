#!/usr/bin/env bash
# test/commit_subjects.sh [BASE]: the commit messages of BASE..HEAD against
# the convention of CONTRIBUTING.md: a subject of at most 72 characters,
# then, if there is a body, a blank line before it.  Fails listing each
# offending commit (hash, the subject's length, the subject).
#
# BASE defaults to the commit that added this script, found in the history
# (no hash is written here): every commit after it is checked, merges
# included (git's own "Merge branch 'x'" subjects are short).  Commits of a
# branch forked before that commit and merged after it are checked too.
# Outside a git work tree it says so and passes; in a shallow clone whose
# history does not reach that commit it checks the commits the clone has
# (the shallow boundary stands for the base) and says so.  Fast: .ci/run
# runs it first; test/t/045_commit_subjects.pl checks that it fails.
set -euo pipefail
max=72
self=test/commit_subjects.sh

if ! command -v git >/dev/null; then
	echo "commit_subjects: git is not installed, nothing checked"
	exit 0
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "commit_subjects: not a git work tree, nothing checked"
	exit 0
fi
cd "$(git rev-parse --show-toplevel)"

base=${1:-}
if [ -z "$base" ]; then
	# the first commit that added the script (following renames)
	base=$(git log --follow --diff-filter=A --format=%H -- "$self" | tail -n 1)
	if [ -z "$base" ]; then
		echo "commit_subjects: $self is not committed yet, nothing checked"
		exit 0
	fi
	if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
		echo "commit_subjects: a shallow clone; checked from $(git rev-parse --short "$base") on" \
			"(the commit that added $self, or the shallow boundary if the clone does not reach it)"
	fi
fi
git rev-parse --verify --quiet "$base^{commit}" >/dev/null ||
	{ echo "commit_subjects: no commit $base" >&2; exit 2; }

# one record per commit: the short hash, a newline, the raw message; NUL-separated
git log -z --format='%h%n%B' "$base..HEAD" | perl -CS -Mutf8 -e '
	use strict;
	use warnings;
	binmode(STDIN, ":encoding(UTF-8)");
	my ($max, $n, @bad) = ($ARGV[0], 0);
	local $/ = "\0";
	while (my $rec = <STDIN>)
	{
		chomp $rec;
		next if $rec eq "";
		my ($hash, $subject, $second) = split /\n/, $rec, 4;
		$subject //= "";
		$n++;
		push @bad, sprintf("%s  %d characters: %s", $hash, length($subject), $subject)
		  if length($subject) > $max;
		push @bad, sprintf("%s  no blank line after the subject: %s", $hash, $subject)
		  if defined $second && $second ne "";
	}
	if (@bad)
	{
		print "commit_subjects: ", scalar(@bad), " problem(s) in $n commit(s):",
		  " a subject is at most $max characters, then a blank line before the body",
		  " (CONTRIBUTING.md)\n";
		print "  $_\n" for @bad;
		exit 1;
	}
	print "commit_subjects: $n commit(s) checked, every subject at most $max characters\n";
' "$max"
