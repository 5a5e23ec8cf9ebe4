# shellcheck shell=bash
# apt_install for the set-up scripts (sourced): install a Debian package unless the
# command it provides is already there. The set-up's steps run side by side
# (hack/setup-test-tools.sh, `make setup`, .ci/run's image build), and apt allows one
# apt-get at a time (a second fails on dpkg's lock), so each install holds a lock file
# of ours for its update and install: they take turns instead of failing.

with_apt_lock() {  # with_apt_lock CMD...: run CMD holding the set-up's apt lock
  (
    flock 9
    "$@"
  ) 9>"${TMPDIR:-/tmp}/sparkllm-apt.lock"
}

apt_install() {  # apt_install COMMAND PACKAGE: install PACKAGE unless COMMAND exists
  command -v "$1" >/dev/null && return 0
  with_apt_lock _apt_install "$@"
}

_apt_install() {
  command -v "$1" >/dev/null && return 0  # another step installed it while we waited
  local sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  echo "${0##*/}: apt-get install $2 (for $1)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}
