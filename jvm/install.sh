#!/usr/bin/env bash
# Install one pinned JVM artifact set, jvm/<name>/pom.xml, into .jvm/<name>/ (project-local).
# The jars are checked against jvm/<name>/sha256sums. A set already installed from the same pom and sums is
# left alone without touching the network; `--pin` (re)writes sha256sums from what Maven resolved.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: jvm/install.sh NAME [--pin]}
pin=${2:-}
spec=jvm/$name
dest=.jvm/$name
[ -f "$spec/pom.xml" ] || { echo "error: no $spec/pom.xml" >&2; exit 1; }
stamp=$dest/.installed
want=$({ cat "$spec/pom.xml"; cat "$spec/sha256sums" 2>/dev/null || true; } | sha256sum | cut -d' ' -f1)
if [ -z "$pin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
command -v mvn >/dev/null || { echo "error: Maven (mvn) is needed once to fetch $name; apt-get install -y maven" >&2; exit 1; }
echo "installing the JVM artifacts of $name into $dest (Maven, once)"
mkdir -p .jvm
exec 9>.jvm/.install.lock
flock 9  # sets fetched side by side (make -j) share Maven's local repository below: one at a time
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
# -C: fail on a checksum mismatch from the repository; the project-local repository keeps ~/.m2 out of it
mvn -q -B -C -f "$spec/pom.xml" -Dmaven.repo.local="$PWD/.jvm/m2" \
  dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$PWD/$dest.tmp" >"$dest.tmp.log" 2>&1 \
  || { tail -20 "$dest.tmp.log" >&2; echo "error: Maven could not fetch $name (log: $dest.tmp.log)" >&2; exit 1; }
rm -f "$dest.tmp.log"
if [ "$pin" = "--pin" ]; then
  (cd "$dest.tmp" && sha256sum -- *.jar) > "$spec/sha256sums"
  echo "pinned $(wc -l < "$spec/sha256sums") jars in $spec/sha256sums"
  want=$(cat "$spec/pom.xml" "$spec/sha256sums" | sha256sum | cut -d' ' -f1)
else
  [ -f "$spec/sha256sums" ] || { echo "error: $spec/sha256sums missing: run jvm/install.sh $name --pin and commit it" >&2; exit 1; }
  # every pinned jar present and intact, and nothing unpinned
  (cd "$dest.tmp" && sha256sum --quiet -c "$OLDPWD/$spec/sha256sums") >&2 \
    || { echo "error: $name: jars differ from $spec/sha256sums" >&2; exit 1; }
  extra=$(comm -13 <(cut -d' ' -f3 "$spec/sha256sums" | sort) <(cd "$dest.tmp" && ls -1 -- *.jar | sort))
  [ -z "$extra" ] || { echo "error: $name: unpinned jars: $extra" >&2; exit 1; }
fi
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "$want" > "$stamp"
echo "installed $(ls "$dest"/*.jar | wc -l) jars of $name"
