#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages that building and testing omniserve needs, then prepares
# the build-only C headers. Idempotent: packages already installed are skipped, and apt-get
# update runs only when something is missing. Works as root or through sudo.
set -euo pipefail

packages=(
  pkg-config
  nlohmann-json3-dev            # llama.cpp headers the ollama module zip leaves out
  libstb-dev                    # idem
  flite1-dev                    # TTS
  libpocketsphinx-dev           # streaming ASR
  libsphinxbase-dev
  pocketsphinx-en-us            # acoustic model, dictionary, language model
  pocketsphinx-testdata         # real human speech used by the tests
  libwebrtc-audio-processing-dev  # VAD
  libspeexdsp-dev               # noise reduction (speex preprocessor)
  nodejs                        # OpenAI Node SDK compatibility test
  npm
  chromium                      # headless browser for the console and bench report tests (test/browser)
  haproxy                       # deploy/haproxy: the replicas-behind-a-balancer test
)

# present reports whether package $1 is installed. nodejs and npm also count as present when
# their commands exist: NodeSource's nodejs package ships npm and conflicts with Debian's npm.
present() {
  case "$1" in
    nodejs) command -v node >/dev/null 2>&1 && return 0 ;;
    npm) command -v npm >/dev/null 2>&1 && return 0 ;;
  esac
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing=()
for p in "${packages[@]}"; do
  if ! present "$p"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  elif command -v sudo >/dev/null 2>&1 && [ -t 0 ]; then
    sudo=(sudo)  # interactive: sudo may ask for a password
  else
    echo "install-deps: need root to install: ${missing[*]}" >&2
    echo "install-deps: run as root, give this user sudo, or run: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

"$(dirname "$0")/cgo-headers.sh" >/dev/null
