#!/usr/bin/env bash
# Export the official PCL-SISR code (github.com/Aitical/PCL-SISR) for `contrasuite bench super_resolution
# --against official`: the pinned commit, blob by blob, into a scratch folder outside this repository, with
# pcl_sisr.patch applied, and the libraries its modules import that this project does not install, put in
# $OFFICIAL/site (pip --target, no dependencies: numpy, scipy, torch, kornia, ... come from the project's
# environment). The bench adds $OFFICIAL/site to the end of sys.path while it imports the official modules.
#
# usage: export_pcl_sisr.sh
# env:   PCL_GIT    the fetched repository's git directory (default /work/.mirror/Aitical+PCL-SISR/repo)
#        PCL_COMMIT commit to export (default ba4cbb770f921b4d859547c9edec27c8ec89cb65)
#        OFFICIAL   scratch folder (default /tmp/official/pcl_sisr)
#        PYTHON     the project's interpreter (default python)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PCL_GIT=${PCL_GIT:-/work/.mirror/Aitical+PCL-SISR/repo}
PCL_COMMIT=${PCL_COMMIT:-ba4cbb770f921b4d859547c9edec27c8ec89cb65}
OFFICIAL=${OFFICIAL:-/tmp/official/pcl_sisr}
PYTHON=${PYTHON:-python}

"$HERE/../export_commit.sh" "$PCL_GIT" "$PCL_COMMIT" "$OFFICIAL" "$HERE/pcl_sisr.patch"

# einops (loss/adversarial.py), pytorch_wavelets and PyWavelets (loss/discriminator.py), imageio and scikit-image
# with lazy-loader and tifffile (utility.py, data/), six (pytorch_wavelets), and setuptools < 81 for the
# pkg_resources that pytorch_wavelets 1.3.0 imports (newer setuptools no longer ship it)
if [ ! -f "$OFFICIAL/site/.installed" ]; then
  "$PYTHON" -m pip install --quiet --no-deps --target "$OFFICIAL/site" einops==0.8.2 pytorch-wavelets==1.3.0 \
    PyWavelets==1.9.0 imageio==2.38.2 scikit-image==0.26.0 lazy-loader==0.6 tifffile==2026.3.3 six==1.17.0 \
    'setuptools<81'
  touch "$OFFICIAL/site/.installed"
fi
echo "$OFFICIAL/src"
