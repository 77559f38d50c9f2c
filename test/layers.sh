#!/usr/bin/env bash
# test/layers.sh [SRC]: the include lines of SRC (default src/) against the
# layers written in SRC/README.md ("## Layers": "folder: folders it may
# include").  Fails, naming each offending line, when
#  - a file of a folder includes a project folder its folder does not name
#    (an upward include, or a sideways one not allowed);
#  - a project header is included without its folder ("job_sql.h");
#  - a folder under SRC is missing from the layers, or the layers name one
#    that does not exist;
#  - the layers themselves form a circle.
# Run by test/t/000_layers.pl, also on a copy with an upward include, which
# must fail.
set -euo pipefail
src=${1:-src}
readme=$src/README.md
[ -f "$readme" ] || { echo "layers: $readme is missing" >&2; exit 2; }

awk -v src="$src" -v readme="$readme" '
	FNR == 1 { file++ }
	# the layers: indented "folder: allowed ..." lines after "## Layers"
	file == 1 && /^## / { in_layers = ($0 == "## Layers") ; next }
	file == 1 && in_layers && /^    [a-z_]+:/ {
		line = $0
		sub(/^ +/, "", line)
		name = line
		sub(/:.*/, "", name)
		sub(/^[^:]*:/, "", line)
		declared[name] = 1
		order[++n] = name
		allowed[name] = " " name " " line " "
		next
	}
	file == 2 { folders[$0] = 1; next }
	file == 3 { headers[$0] = 1; next }
	# the include lines: "path:line:#include ..."
	file == 4 {
		path = $0
		sub(/:.*/, "", path)
		rel = substr(path, length(src) + 2)
		folder = (index(rel, "/") ? substr(rel, 1, index(rel, "/") - 1) : "")
		inc = $0
		sub(/^[^"]*"/, "", inc)
		sub(/".*/, "", inc)
		target = (index(inc, "/") ? substr(inc, 1, index(inc, "/") - 1) : "")
		if (target == "" && (inc in headers)) {
			printf "%s: project header \"%s\" without its folder\n", path, inc
			bad++
		}
		else if (target in folders && folder != "" && index(allowed[folder], " " target " ") == 0) {
			rest = substr(allowed[folder], length(folder) + 3)
			gsub(/  +/, " ", rest)
			sub(/^ /, "", rest)
			sub(/ +$/, "", rest)
			printf "%s: %s/ may not include %s (%s/ may include: %s)\n", \
				path, folder, inc, folder, (rest == "" ? "nothing" : rest)
			bad++
		}
	}
	END {
		for (f in folders)
			if (!(f in declared)) { printf "layers: folder %s/ is not in %s\n", f, readme; bad++ }
		for (f in declared)
			if (!(f in folders)) { printf "layers: %s names %s/, which does not exist\n", readme, f; bad++ }
		# a folder may only include folders declared before it: no circle
		for (i = 1; i <= n; i++) {
			split(allowed[order[i]], a, " ")
			for (k in a) {
				seen = 0
				for (j = 1; j < i; j++) if (order[j] == a[k]) seen = 1
				if (!seen && a[k] != order[i]) {
					printf "layers: %s may include %s, which is not below it\n", order[i], a[k]
					bad++
				}
			}
		}
		if (n == 0) { print "layers: no \"## Layers\" section"; bad++ }
		exit bad ? 1 : 0
	}
' "$readme" \
	<(find "$src" -mindepth 1 -maxdepth 1 -type d -printf '%f\n') \
	<(find "$src" -name '*.h' -printf '%f\n') \
	<(grep -rnH --include='*.c' --include='*.h' '^#include "' "$src" | sed 's/:[0-9]*:/:/') \
	|| { echo "layers: FAILED (the rule: $readme, \"## Layers\")"; exit 1; }
echo "layers: every include of $src follows $readme"
