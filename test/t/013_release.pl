# 013_release.pl: the release metadata tells the truth, and the checks that
# keep it so fail when they should.
#
# - release/meta_check passes on this tree, and on copies of it with one
#   thing wrong it fails naming that thing: a second extension's control
#   file (the router: notif_deliver_router, requiring plproxy) without its
#   META.json entry and prereq, an entry without a control file, a version
#   out of step with default_version or debian/changelog, a PostgreSQL
#   prereq other than the majors debian/pgversions tests, and breaches of
#   the PGXN Meta Spec (no SemVer, a required key missing, an unknown
#   license or key, an empty bug tracker, a bad version range).
# - debian/control is what `pg_buildext updatecontrol` makes of
#   debian/control.in (checkcontrol), and checkcontrol notices a change.
# - release/dist (make dist), in a git repository made of this tree with the
#   tag v<version>: notif_deliver-<version>.zip with everything under
#   notif_deliver-<version>/, META.json and every control file and script
#   in it, CI's files not; no tag, or a tag whose META.json is wrong, gives
#   no archive.
#
# Needs no server.  The installed package is checked by release/package_check.
use strict;
use warnings;
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use IO::Uncompress::Unzip qw($UnzipError);
use JSON::PP;
use Test::More;

my $top = `pwd`;
chomp $top;
my $json = JSON::PP->new->pretty->canonical;

sub slurp { my ($f) = @_; open my $fh, '<', $f or die "$f: $!"; local $/; return <$fh>; }
sub spew { my ($f, $s) = @_; open my $fh, '>', $f or die "$f: $!"; print $fh $s; close $fh; }

# the tree's source files (what git would archive), copied to a new folder
my @files = grep { -f } split /\0/, `cd '$top' && { git ls-files -z --cached --others --exclude-standard 2>/dev/null || find . -type f -printf '%P\\0'; }`;
@files = grep { !m{^(\.git(/|$)|(build|tmp_check|results|log)/)} } @files;
# without git (or where it refuses the copy, as in a worktree's copy owned by
# the test user), find also lists what .gitignore leaves out: what make
# built (objects, the install script in progress) and pg_regress's output,
# which changes under our feet (make test runs pg_regress beside the TAP files)
my ($built) = slurp("$top/Makefile") =~ /^NOTIF_INSTALL_SQL = (\S+)/m;
@files = grep { $_ ne ($built // '') && !/\.(o|so|bc)$/ && !/^regression\.(out|diffs)$/ } @files;
ok(scalar(grep { $_ eq 'META.json' } @files), 'the tree has META.json (' . scalar(@files) . ' files)');

sub copy_tree
{
	my $dir = tempdir(DIR => $ENV{TMPDIR} // '/tmp', CLEANUP => 1);
	for my $f (@files)
	{
		my $to = "$dir/$f";
		make_path($to =~ s{/[^/]*$}{}r);
		copy("$top/$f", $to) or die "copy $f: $!";
		chmod((stat("$top/$f"))[2] & 07777, $to);
	}
	return $dir;
}

sub meta_check
{
	my ($dir) = @_;
	my $out = `perl '$top/release/meta_check' '$dir' 2>&1`;
	return ($? >> 8, $out);
}

sub edit_meta
{
	my ($dir, $edit) = @_;
	my $meta = decode_json(slurp("$dir/META.json"));
	$edit->($meta);
	spew("$dir/META.json", $json->encode($meta));
}

# ---------------------------------------------------------------- meta_check
my ($rc, $out) = meta_check($top);
is($rc, 0, 'meta_check passes on this tree') or diag($out);
my $v = decode_json(slurp("$top/META.json"))->{version};
like($out, qr/valid PGXN metadata for notif_deliver \Q$v\E/, "for notif_deliver $v");

# One change to a copy of the tree, and the problem meta_check must name.
sub fails_with
{
	my ($what, $change, $expect) = @_;
	my $dir = copy_tree();
	$change->($dir);
	my ($rc, $out) = meta_check($dir);
	isnt($rc, 0, "meta_check fails: $what");
	like($out, $expect, "  and says so") or diag($out);
	return $dir;
}

my $add_router = sub {
	my ($dir) = @_;
	spew("$dir/router/notif_deliver_router.control",
		"comment = 'route notifications to shards'\ndefault_version = '1.0'\n"
		  . "relocatable = false\nrequires = 'plproxy'\n");
	spew("$dir/router/notif_deliver_router--1.0.sql", "-- the router\n");
	# (the tree ships the router: its entries go, as if they were forgotten)
	edit_meta($dir, sub {
		delete $_[0]{provides}{notif_deliver_router};
		delete $_[0]{prereqs}{runtime}{requires}{plproxy};
	});
};
my $router = fails_with('a control file without its provides entry', $add_router,
	qr/provides: no entry for notif_deliver_router .*"file": "router\/notif_deliver_router\.control", "version": "1\.0\.0"/);
($rc, $out) = meta_check($router);
like($out, qr/prereqs\.runtime\.requires: no entry for plproxy, which router\/notif_deliver_router\.control requires/,
	'  and that the extension it requires is no prereq');
edit_meta($router, sub {
	my ($m) = @_;
	$m->{provides}{notif_deliver_router} = { file => 'router/notif_deliver_router.control', version => '1.0.0',
		abstract => 'route notifications to shards' };
	$m->{prereqs}{runtime}{requires}{plproxy} = '2.0.0';
});
($rc, $out) = meta_check($router);
is($rc, 0, 'with the router in provides and plproxy in prereqs, it passes') or diag($out);
like($out, qr/notif_deliver \Q$v\E, notif_deliver_router 1\.0\.0/, '  naming both extensions');

fails_with('an entry without a control file',
	sub { edit_meta($_[0], sub { $_[0]{provides}{notif_other} = { file => 'META.json', version => '1.0.0' } }) },
	qr/provides\.notif_other: the distribution has no notif_other\.control/);
fails_with('a default_version META.json does not have',
	sub { my $c = slurp("$_[0]/notif_deliver.control") =~ s/default_version = '[0-9.]+'/default_version = '9.9'/r;
		spew("$_[0]/notif_deliver.control", $c) },
	qr/provides\.notif_deliver\.version: \Q$v\E, but notif_deliver\.control's default_version 9\.9 makes it 9\.9\.0/);
fails_with('a distribution version that is not its extension\'s',
	sub { edit_meta($_[0], sub { $_[0]{version} = '9.9.1' }) },
	qr/version: 9\.9\.1, but the main extension notif_deliver is at \Q$v\E/);
fails_with('a Debian version that is not META.json\'s',
	sub { spew("$_[0]/debian/changelog", slurp("$_[0]/debian/changelog") =~ s/\(\Q$v\E-1\)/(9.9.0-1)/r) },
	qr/debian\/changelog: version 9\.9\.0-1, but META\.json says \Q$v\E/);
fails_with('a PostgreSQL prereq wider than what is tested',
	sub { edit_meta($_[0], sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '15.0.0' }) },
	qr/PostgreSQL: "15\.0\.0", but debian\/pgversions builds and tests 15, 17, 18: ">= 15\.0\.0, < 19\.0\.0"/);
fails_with('a tested major that META.json does not list',
	sub { edit_meta($_[0], sub { $_[0]{x_tested_postgresql} = [ '15', '16', '17', '18' ] }) },
	qr/x_tested_postgresql: \[15, 16, 17, 18\], but debian\/pgversions builds and tests 15, 17, 18/);
fails_with('a version that is not SemVer',
	sub { edit_meta($_[0], sub { $_[0]{provides}{notif_deliver}{version} = '1.2' }) },
	qr/provides\.notif_deliver\.version: "1\.2" is not a SemVer version/);
fails_with('a required key missing',
	sub { edit_meta($_[0], sub { delete $_[0]{abstract} }) },
	qr/required key "abstract" is missing/);
fails_with('a license the spec does not name',
	sub { edit_meta($_[0], sub { $_[0]{license} = 'GPL' }) },
	qr/license: "GPL" is not a license name of the spec/);
fails_with('an unknown key',
	sub { edit_meta($_[0], sub { $_[0]{homepage} = 'https://example.org/' }) },
	qr/unknown key "homepage" \(custom keys start with x_ or X_\)/);
fails_with('a bug tracker with neither web nor mailto',
	sub { edit_meta($_[0], sub { $_[0]{resources}{bugtracker} = {} }) },
	qr/resources\.bugtracker: needs web or mailto/);
fails_with('a prereq that is not a version range',
	sub { edit_meta($_[0], sub { $_[0]{prereqs}{runtime}{requires}{plpgsql} = 'latest' }) },
	qr/prereqs\.runtime\.requires\.plpgsql: "latest" is not a version range/);
fails_with('a prereq phase the spec does not know',
	sub { edit_meta($_[0], sub { $_[0]{prereqs}{deploy} = { requires => { plpgsql => '0' } } }) },
	qr/prereqs: unknown phase "deploy"/);
my $custom = copy_tree();
edit_meta($custom, sub { $_[0]{x_homepage} = 'https://example.org/' });
($rc, $out) = meta_check($custom);
is($rc, 0, 'a custom x_ key is allowed') or diag($out);

# ---------------------------------------------------------------- debian/control
SKIP:
{
	skip 'pg_buildext (postgresql-common) is not installed', 3
	  unless system('command -v pg_buildext >/dev/null') == 0;
	my $dir = copy_tree();
	# debian/control is committed for Debian 12's PostgreSQL (15); on a
	# Debian release whose PostgreSQL is another major (17 in Debian 13),
	# release/deb writes it again, as done here first
	my $supported = join(' ', split ' ', `pg_buildext supported-versions '$dir' 2>/dev/null`);
	if ($supported ne '15')
	{
		$out = `cd '$dir' && pg_buildext updatecontrol 2>&1`;
		is($?, 0, "pg_buildext updatecontrol for this system's PostgreSQL $supported") or diag($out);
	}
	$out = `cd '$dir' && pg_buildext checkcontrol 2>&1`;
	is($?, 0, 'debian/control is up to date with debian/control.in') or diag($out);
	spew("$dir/debian/control.in", slurp("$dir/debian/control.in") =~ s/^Section: database$/Section: misc/mr);
	$out = `cd '$dir' && pg_buildext checkcontrol 2>&1`;
	isnt($?, 0, 'checkcontrol fails when debian/control.in changed');
	like($out, qr/debian\/control needs updating/, '  asking for pg_buildext updatecontrol') or diag($out);
}

# ---------------------------------------------------------------- make dist
SKIP:
{
	skip 'git is not installed', 9 unless system('command -v git >/dev/null') == 0;
	my $repo = copy_tree();
	my $git = "cd '$repo' && git -c user.name=test -c user.email=test\@localhost";
	system("$git init -q && $git add -A && $git commit -q -m release && $git tag v$v") == 0
	  or die 'cannot make the test repository';

	$out = `cd '$repo' && bash release/dist 2>&1`;
	is($?, 0, "make dist archives the tag v$v") or diag($out);
	my $zip = "$repo/notif_deliver-$v.zip";
	ok(-f $zip, "as notif_deliver-$v.zip");

	my (%members, $meta_text);
	my $u = IO::Uncompress::Unzip->new($zip) or die "unzip: $UnzipError";
	for (my $status = 1; $status > 0; $status = $u->nextStream)
	{
		my $name = $u->getHeaderInfo->{Name};
		$members{$name} = 1;
		if ($name eq "notif_deliver-$v/META.json")
		{
			local $/;
			$meta_text = <$u>;
		}
	}
	is(scalar(grep { !m{^notif_deliver-\Q$v\E/} } keys %members), 0,
		"everything in it is under notif_deliver-$v/");
	ok(defined $meta_text && decode_json($meta_text)->{version} eq $v, "its META.json says $v");
	my @wanted = grep { m{^(router/)?[^/]*(\.control|\.sql)$} || m{^(router/)?Makefile$} || m{^src/.*\.c$} } @files;
	is_deeply([ grep { !$members{"notif_deliver-$v/$_"} } @wanted ], [],
		'it holds the Makefile, the sources, every control file and script (' . scalar(@wanted) . ' files)');
	is_deeply([ grep { m{^notif_deliver-\Q$v\E/\.(ci|git)} } sort keys %members ], [],
		'and none of CI\'s or git\'s files');

	system("$git tag -d v$v >/dev/null") == 0 or die;
	unlink $zip;
	$out = `cd '$repo' && bash release/dist 2>&1`;
	like($out, qr/no tag v\Q$v\E: tag the release first/, 'without the tag, make dist says to tag first');

	edit_meta($repo, sub { $_[0]{provides}{notif_deliver}{version} = '1.1.0' });
	system("$git commit -q -a -m wrong && $git tag v$v") == 0 or die;
	$out = `cd '$repo' && bash release/dist 2>&1`;
	like($out, qr/the META\.json of v\Q$v\E does not match its release/,
		'a tag whose META.json is wrong is refused');
	ok(!-e $zip, '  and no archive is made');
}

done_testing();
