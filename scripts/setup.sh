#!/usr/bin/env bash
# loconet setup: idempotent; seconds when nothing changed.
#   1. a virtualenv (.venv) with the project installed (editable) from pyproject.toml, with the
#      test and dev extras (pytest; the pinned ruff, mypy and pre-commit of `make lint`)
#   2. cometbft built from the pinned module's source with scripts/cometbft/*.patch into .bin/
#      (found by the CLI, PATH untouched), and Shopify's toxiproxy (`testnet up --wan`) with
#      `go install` into .bin/toxiproxy-server
#   3. Python protobuf stubs generated from the pinned cometbft module's proto/ folder,
#      gogoproto, and our own proto/ files, into abci_app/codec/gen/ (build output).
#   4. the EVM side (contracts/): solc, OpenZeppelin and anvil from npm at the versions pinned
#      in contracts/package-lock.json (`npm ci`), and the contracts compiled into contracts/build/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
COMETBFT_VERSION=v0.38.25
GOGOPROTO_VERSION=v1.7.0
PY=${PYTHON:-python3.11}

need() {  # need CMD "one sentence saying what to install"
  command -v "$1" >/dev/null 2>&1 || { echo "error: $2" >&2; exit 1; }
}
need "$PY" "Python 3.11 is required: install python3.11 (or set PYTHON=/path/to/python3.11) and rerun make setup."
need go "Go is required to build cometbft: install Go >= 1.22 from https://go.dev/dl and rerun make setup."
need patch "patch is required to build cometbft: install it (apt install patch) and rerun make setup."
need gcc "A C compiler is required (cgo and Python wheels): install gcc (apt install build-essential) and rerun make setup."
need node "Node.js is required for the Solidity compiler (solcjs): install Node.js >= 18 and rerun make setup."

# 1. virtualenv
stamp=.venv/.loconet-installed
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing Python dependencies (first run downloads torch; a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test,dev]'
  touch "$stamp"
fi

# 2. cometbft: the pinned release's module source, with the patches in scripts/cometbft/ applied
#    (each says why; README *Stack*), built with `go build` into .bin/. The stamp names the version
#    and the patches' hash, so a changed patch rebuilds; the binary is written under a temporary
#    name and renamed when complete.
patch_sum=$(cat scripts/cometbft/*.patch | sha256sum | cut -c1-64)
comet_want="${COMETBFT_VERSION#v} $patch_sum"
if [ ! -x .bin/cometbft ] || [ "$(cat .bin/.cometbft-build 2>/dev/null)" != "$comet_want" ] \
    || [ "$(.bin/cometbft version 2>/dev/null)" != "${COMETBFT_VERSION#v}" ]; then
  echo "setup: building cometbft $COMETBFT_VERSION with scripts/cometbft/*.patch (first run: about 2 minutes)"
  comet_dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/cometbft/cometbft@$COMETBFT_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  src=.build/cometbft-$COMETBFT_VERSION
  rm -rf "$src" && mkdir -p .build .bin
  cp -R "$comet_dir" "$src" && chmod -R u+w "$src"
  for p in scripts/cometbft/*.patch; do
    patch -s -p1 -d "$src" --no-backup-if-mismatch < "$p" || { echo "error: $p does not apply to cometbft $COMETBFT_VERSION" >&2; exit 1; }
  done
  (cd "$src" && GOFLAGS=-mod=mod go build -trimpath -o "$ROOT/.bin/cometbft.partial" ./cmd/cometbft)
  mv -f .bin/cometbft.partial .bin/cometbft
  echo "$comet_want" > .bin/.cometbft-build
  rm -rf "$src"
fi

# 2b. toxiproxy (Shopify's fault-injection TCP proxy; `loconet testnet up --wan`, node/local/wan.py): the
#     pinned release built with `go install` into .bin/ (go names the binary `server`: it is
#     installed into a staging folder and renamed .bin/toxiproxy-server when complete). The stamp
#     names the version; -ldflags puts it in `toxiproxy-server -version` too.
TOXIPROXY_VERSION=v2.12.0
toxi_want="toxiproxy-server version ${TOXIPROXY_VERSION#v}"
if [ ! -x .bin/toxiproxy-server ] || [ "$(cat .bin/.toxiproxy-build 2>/dev/null)" != "$TOXIPROXY_VERSION" ] \
    || [ "$(.bin/toxiproxy-server -version 2>/dev/null)" != "$toxi_want" ]; then
  echo "setup: building toxiproxy $TOXIPROXY_VERSION with go install (testnet up --wan; first run: about 30 s)"
  stage="$ROOT/.bin/.toxiproxy-install"
  rm -rf "$stage" && mkdir -p "$stage"
  GOBIN="$stage" go install -trimpath \
      -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}" \
      "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
    || { echo "error: go install github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION failed (see above; it needs the Go module proxy): fix that and rerun make setup" >&2; exit 1; }
  mv -f "$stage/server" .bin/toxiproxy-server
  rm -rf "$stage"
  echo "$TOXIPROXY_VERSION" > .bin/.toxiproxy-build
fi

# 3. protobuf stubs
gen=abci_app/codec/gen
gen_stamp=$gen/.stamp-$COMETBFT_VERSION
# the stamp holds a hash of our .proto files: a checkout or rebase that changes any of them
# regenerates (file times are no guide after git operations)
proto_sum=$(find proto -name '*.proto' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
if [ ! -f "$gen_stamp" ] || [ "$(cat "$gen_stamp" 2>/dev/null)" != "$proto_sum" ]; then
  echo "setup: generating protobuf stubs"
  comet_dir=$(go mod download -json "github.com/cometbft/cometbft@$COMETBFT_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  gogo_dir=$(go mod download -json "github.com/cosmos/gogoproto@$GOGOPROTO_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$gen" && mkdir -p "$gen"
  (cd "$comet_dir/proto" && find tendermint -name '*.proto' | sort) > "$gen/.comet-protos"
  (find proto -name '*.proto' | sed 's#^proto/##' | sort) > "$gen/.own-protos"
  .venv/bin/python -m grpc_tools.protoc \
    -I "$comet_dir/proto" -I "$gogo_dir" -I proto \
    --python_out="$gen" \
    gogoproto/gogo.proto $(cat "$gen/.comet-protos") $(cat "$gen/.own-protos")
  echo "$proto_sum" > "$gen_stamp"
fi
# 4. contracts: npm packages (solc, OpenZeppelin, anvil) and the compiled artifacts
npm_stamp=contracts/node_modules/.loconet-installed
if [ ! -f "$npm_stamp" ] || [ contracts/package-lock.json -nt "$npm_stamp" ]; then
  echo "setup: installing solc, OpenZeppelin contracts and anvil from npm (contracts/package-lock.json)"
  (cd contracts && npm ci --no-audit --no-fund --loglevel=error)
  touch "$npm_stamp"
fi
build_stamp=contracts/build/.stamp
newest_sol=$(find contracts/src contracts/build.js "$npm_stamp" -newer "$build_stamp" 2>/dev/null | head -1 || true)
if [ ! -f "$build_stamp" ] || [ -n "$newest_sol" ]; then
  echo "setup: compiling contracts/src with solc"
  rm -rf contracts/build
  node contracts/build.js
  touch "$build_stamp"
fi

# 5. headless Chromium from Debian's packages, for the explorer's browser test (only when missing;
#    setup goes on without it: that one test then fails naming this fix)
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  echo "setup: installing Debian's chromium (apt-get; the explorer's browser test)"
  sudo_=""
  if [ "$(id -u)" -ne 0 ]; then sudo_="sudo -n"; fi
  apt_() { DEBIAN_FRONTEND=noninteractive $sudo_ apt-get "$@" >/dev/null 2>&1; }
  if ! { apt_ install -y -q --no-install-recommends chromium || { apt_ update -q && apt_ install -y -q --no-install-recommends chromium; }; }; then
    echo "error: could not install chromium with apt-get (needs root or sudo and Debian's repositories): run 'sudo apt-get install chromium' for the explorer's browser test" >&2
  fi
fi
echo "setup: ok (cometbft $(.bin/cometbft version), toxiproxy ${TOXIPROXY_VERSION#v}, venv .venv, stubs in $gen, contracts in contracts/build)"
