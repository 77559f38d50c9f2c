# release/lib.sh: helpers shared by release/deb, release/package_check and
# the scripts that build and test in test/chroot's chroots (sourced, not
# run).

# The source files of the tree at $1, NUL-separated, sorted: what git tracks
# plus new files it does not ignore (so uncommitted work is built as it is);
# in a copy made by copy_tree (no .git), the files it copied (listed in its
# .tree_files); else every file but build/ (e.g. an unpacked PGXN archive).
tree_files()
{
	(
		cd "$1"
		if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
			git ls-files -z --cached --others --exclude-standard |
				while IFS= read -r -d '' f; do
					[ -f "$f" ] && printf '%s\0' "$f"
				done
		elif [ -f .tree_files ]; then
			while IFS= read -r -d '' f; do
				[ -f "$f" ] && printf '%s\0' "$f"
			done <.tree_files
		else
			find . -path ./build -prune -o -type f -printf '%P\0'
		fi
	) | sort -z
}

# Copy tree_files of $1 into the existing folder $2, with their list in
# $2/.tree_files (so that tree_files and tree_sum of the copy, which has no
# .git, see the same files after a build there).
copy_tree()
{
	tree_files "$1" >"$2/.tree_files"
	(cd "$1" && tar --null -T - -cf -) <"$2/.tree_files" | tar -xf - -C "$2"
}

# One checksum over the names and contents of tree_files: a package built
# from this tree records it, and is "current" while the tree still has it.
tree_sum()
{
	(cd "$1" && tree_files . | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
}

# The package's file in build/deb/ (not the -dbgsym one), or nothing.
deb_file()
{
	local f
	for f in "$1"/build/deb/postgresql-*-notif-deliver_*.deb; do
		[ -f "$f" ] && echo "$f"
	done
	return 0
}

# Is a Debian package installed (or removed, its configuration kept)?
pkg_present()
{
	local s
	s=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
	[ "$s" != not-installed ] && [ -n "$s" ]
}

# This machine's own PostgreSQL major (pg_config's), or nothing.
host_major()
{
	pg_config --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p'
}

# test/chroot's chroot for a PostgreSQL major (17, 18; 15-17: the upgrade
# test's): "SUITE NAME", its Debian suite and its folder's name, or nothing.
chroot_of()
{
	case $1 in
	17) echo trixie trixie ;;
	18) echo sid sid ;;
	15-17) echo trixie trixie-upgrade ;;
	esac
}

# Its folder, or nothing.
chroot_dir()
{
	local suite name
	read -r suite name <<<"$(chroot_of "$1")"
	[ -z "$name" ] || echo "${NOTIF_CHROOTS:-/var/cache/notif_deliver/chroots}/$name"
}

# Whether test/chroot has made it (the last step of making it: its packages).
chroot_made()
{
	local dir
	dir=$(chroot_dir "$1")
	[ -n "$dir" ] && [ -f "$dir/.notif_deps_done" ]
}
