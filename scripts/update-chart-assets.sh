#!/usr/bin/env bash
# Refetches the charting library the HTML reports inline (loadgen/report/assets/): Chart.js's minified UMD build,
# its licence and its version, from the npm registry (`npm pack`, no install). Usage:
#   scripts/update-chart-assets.sh [VERSION]     (default: the newest 4.x)
# The source-map comment is dropped: a report opened with the browser's developer tools would otherwise try to
# fetch chart.umd.min.js.map, and a report makes no request at all.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
assets="$here/loadgen/report/assets"
spec="chart.js@${1:-4}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$spec" >/dev/null)
tar -xzf "$tmp"/chart.js-*.tgz -C "$tmp"
version="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$tmp/package/package.json")"
grep -v '^//# sourceMappingURL=' "$tmp/package/dist/chart.umd.min.js" > "$assets/chart.umd.min.js"
# Inlined in a <script> element: the file must not close it.
if grep -qi '</script' "$assets/chart.umd.min.js"; then echo "chart.umd.min.js contains </script" >&2; exit 1; fi
cp "$tmp/package/LICENSE.md" "$assets/chart.js.LICENSE.md"
printf '%s\n' "$version" > "$assets/chart.js.version"
echo "Chart.js $version: $(wc -c < "$assets/chart.umd.min.js") bytes in $assets/chart.umd.min.js"
