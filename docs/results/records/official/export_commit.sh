#!/usr/bin/env bash
# Export one commit of a fetched official repository into a scratch folder and apply this project's patch to it,
# once: the export scripts of the folders beside this one call it before their runs.
#
# usage: export_commit.sh GIT_DIR COMMIT DEST PATCH
#   GIT_DIR  the fetched repository's git directory
#   COMMIT   the commit to export, blob by blob (git archive stops at the first blob a stored snapshot lacks;
#            each missing file is named on stderr instead)
#   DEST     the folder to export into; DEST/.patched, holding COMMIT, marks it done (nothing is redone)
#   PATCH    applied in DEST with patch -p1
set -euo pipefail
GIT_DIR=${1:?git directory}; COMMIT=${2:?commit}; DEST=${3:?destination}; PATCH=${4:?patch}
[ -f "$DEST/.patched" ] && exit 0
mkdir -p "$DEST"
git --git-dir="$GIT_DIR" ls-tree -r "$COMMIT" | while read -r mode type sha path; do
  mkdir -p "$DEST/$(dirname "$path")"
  if git --git-dir="$GIT_DIR" cat-file -e "$sha" 2>/dev/null; then
    git --git-dir="$GIT_DIR" cat-file blob "$sha" > "$DEST/$path"
  else
    echo "not in the snapshot: $path" >&2
  fi
done
(cd "$DEST" && patch -p1 < "$PATCH")
echo "$COMMIT" > "$DEST/.patched"
