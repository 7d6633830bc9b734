# Sourced by the scripts that install a Python package for the tests: `make_venv DIR WHO`
# creates the venv DIR unless it exists, installing Debian's python3-venv first when python3
# lacks ensurepip (as root, with apt-get); WHO names the script in its error.
make_venv() {
  local venv="$1" who="$2"
  [ -x "$venv/bin/python3" ] && return 0
  mkdir -p "$(dirname "$venv")"
  if python3 -m venv "$venv" >/dev/null 2>&1; then
    return 0
  fi
  rm -rf "$venv"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    python3 -m venv "$venv"
  else
    echo "$who: python3 -m venv failed; install python3-venv (Debian)" >&2
    return 1
  fi
}
