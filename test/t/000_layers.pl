# 000_layers.pl: src/ keeps its layers (src/README.md, "## Layers"): every
# include line of src/ follows them (test/layers.sh), and the check does
# fail on a copy of src/ with an upward include, a header named without its
# folder, a folder the layers omit and layers that form a circle.  No
# cluster: it reads files only.
use strict;
use warnings;
use File::Temp qw(tempdir);
use Test::More;

sub layers
{
	my ($src) = @_;
	my $out = `bash test/layers.sh '$src' 2>&1`;
	return ($? >> 8, $out);
}

sub copy_of_src
{
	my $dir = tempdir(CLEANUP => 1) . '/src';
	system('cp', '-r', 'src', $dir) == 0 or die "cp src: $?";
	unlink glob("$dir/*.o $dir/*/*.o $dir/*.bc $dir/*/*.bc");
	return $dir;
}

sub edit
{
	my ($file, $from, $to) = @_;
	open my $in, '<', $file or die "$file: $!";
	my $text = do { local $/; <$in> };
	close $in;
	$text =~ s/\Q$from\E/$to/ or die "$file: \"$from\" not found";
	open my $out, '>', $file or die "$file: $!";
	print $out $text;
	close $out;
}

my ($rc, $out) = layers('src');
is($rc, 0, 'src/ follows its layers') or diag($out);

# the transport including push: the circle the layers broke
my $src = copy_of_src();
edit("$src/http/http.c", '#include "http/pools.h"', "#include \"http/pools.h\"\n#include \"provider/push.h\"");
($rc, $out) = layers($src);
is($rc, 1, 'an upward include fails the check');
like($out, qr{\Q$src/http/http.c: http/ may not include provider/push.h (http/ may include: core lifecycle)\E},
	'it names the file, the include and what the folder may include');

$src = copy_of_src();
edit("$src/sender/batch.c", '#include "sender/sender.h"', '#include "sender.h"');
($rc, $out) = layers($src);
is($rc, 1, 'a project header without its folder fails');
like($out, qr{\Q$src/sender/batch.c: project header "sender.h" without its folder\E}, 'and is named');

$src = copy_of_src();
mkdir "$src/extra" or die;
($rc, $out) = layers($src);
is($rc, 1, 'a folder missing from the layers fails');
like($out, qr{layers: folder extra/ is not in }, 'and is named');

$src = copy_of_src();
edit("$src/README.md", "\n    core:\n", "\n    core: enqueue\n");
($rc, $out) = layers($src);
is($rc, 1, 'layers that form a circle fail');
like($out, qr{layers: core may include enqueue, which is not below it}, 'and the circle is named');

done_testing();
