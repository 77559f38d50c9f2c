# 045_commit_subjects.pl: test/commit_subjects.sh (run first by .ci/run)
# checks every commit after the one that added it, and only those: a
# subject of at most 72 characters, a blank line before a body.  On a
# repository of its own: a long subject before the script is let be, one
# after it fails, as does a body without its blank line; a shallow clone
# and a tree without git pass with a message.  No cluster.
use strict;
use warnings;
use Cwd qw(getcwd);
use File::Temp qw(tempdir);
use Test::More;

plan skip_all => 'git is not installed' if system('git --version >/dev/null 2>&1') != 0;
my $script = getcwd() . '/test/commit_subjects.sh';
my $repo = tempdir(CLEANUP => 1) . '/repo';

sub run
{
	my ($dir, $cmd) = @_;
	my $out = `cd '$dir' && $cmd 2>&1`;
	return ($? >> 8, $out);
}

sub commit
{
	my ($message) = @_;
	my $file = "$repo/.message";
	open my $fh, '>', $file or die "$file: $!";
	print $fh $message;
	close $fh;
	my ($rc, $out) = run($repo, "echo x >> f && git add f && git commit -q -F .message && rm .message");
	die "commit: $out" if $rc;
}

my ($rc, $out) = run('/', "git init -q '$repo' && cd '$repo'"
	  . " && git config user.email t\@example.com && git config user.name t");
die "git init: $out" if $rc;
commit(('a' x 80) . "\n");
mkdir "$repo/test" or die "$repo/test: $!";
system('cp', $script, "$repo/test/") == 0 or die "cp: $?";
($rc, $out) = run($repo, "git add test && git commit -q -m 'test: the commit subjects check'");
die "commit: $out" if $rc;

($rc, $out) = run($repo, 'bash test/commit_subjects.sh');
is($rc, 0, 'a long subject before the check is not checked') or diag($out);

commit(('b' x 72) . "\n\nWhy, figures, tests.\n");
($rc, $out) = run($repo, 'bash test/commit_subjects.sh');
is($rc, 0, 'a subject of 72 characters and a body after a blank line pass') or diag($out);
like($out, qr/1 commit\(s\) checked/, 'the commits after the check are checked');

commit(('é' x 72) . "\n");
($rc, $out) = run($repo, 'bash test/commit_subjects.sh');
is($rc, 0, 'characters are counted, not bytes') or diag($out);

commit(('c' x 73) . "\n\nbody\n");
($rc, $out) = run($repo, 'bash test/commit_subjects.sh');
is($rc, 1, 'a subject of 73 characters fails');
like($out, qr/^  [0-9a-f]+  73 characters: c{73}$/m, 'and is listed with its length');

my $bad = `cd '$repo' && git rev-parse --short HEAD`;
chomp $bad;
($rc, $out) = run($repo, 'git reset -q --hard HEAD~1');
commit("a short subject\nthen the body at once\n");
($rc, $out) = run($repo, 'bash test/commit_subjects.sh');
is($rc, 1, 'a body without a blank line after the subject fails');
like($out, qr/no blank line after the subject: a short subject$/m, 'and is listed');
unlike($out, qr/^  \Q$bad\E/m, 'a commit no longer in the history is not');

# a shallow clone that does not reach the commit that added the check
my $shallow = tempdir(CLEANUP => 1) . '/shallow';
($rc, $out) = run('/', "git clone -q --depth 2 'file://$repo' '$shallow'");
die "clone: $out" if $rc;
($rc, $out) = run($shallow, 'bash test/commit_subjects.sh');
is($rc, 1, 'a shallow clone still checks the commits it has');
like($out, qr/a shallow clone/, 'and says it is shallow');

my $plain = tempdir(CLEANUP => 1);
system('cp', '-r', "$repo/test", $plain) == 0 or die "cp: $?";
($rc, $out) = run($plain, 'bash test/commit_subjects.sh');
is($rc, 0, 'outside git it passes');
like($out, qr/not a git work tree/, 'and says so');

done_testing();
