# shellcheck shell=bash
# What the project's tests need beyond the Rust toolchain, and how to get it. Sourced by
# scripts/test and scripts/install-test-deps (not run on its own).
#
# A test that needs one of these is named with a prefix for it (the test fails naming
# what is missing when it is absent; `scripts/test --skip-missing` leaves it out by
# name instead and reports it as not run). A test gets the single most specific prefix;
# PREFIXES lists what each prefix implies:
#   needs_root__      root, ip, iptables       network namespaces (the netns backend)
#   needs_python3__   root, ip, iptables, python3   netns tests whose stand-in servers are python3
#   needs_sshd__      root, ip, iptables, sshd, ssh, ssh-keygen   sshd in network namespaces
#   needs_chromium__  chromium                 the report pages in a headless browser
#   needs_fixtures__  fixtures                 ../shared/fixtures beside the checkout
#
# The double underscore keeps the prefix from matching inside another name (libtest's
# --skip matches substrings); rustc's non_snake_case lint objects to it, so each such
# test carries #[allow(non_snake_case)].

# The repository's root (this file lives in <root>/scripts).
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Where the fixture tests look (relative to each crate: ../../shared/fixtures/porcupine).
FIXTURES="$REPO_ROOT/../shared/fixtures/porcupine"

# prefix -> the prerequisites its tests need (used by scripts/test).
# shellcheck disable=SC2034
declare -A PREFIXES=(
    [needs_root__]="root ip iptables"
    [needs_python3__]="root ip iptables python3"
    [needs_sshd__]="root ip iptables sshd ssh ssh-keygen"
    [needs_chromium__]="chromium"
    [needs_fixtures__]="fixtures"
)
# Every prerequisite, in the order they are reported; cc builds the workspace (mimalloc
# compiles C) and node checks the report pages' scripts (report/assets/*.js, in the
# report crate's tests and .ci/run): both are needed by every run.
ALL_PREREQUISITES="cc node root ip iptables python3 sshd ssh ssh-keygen chromium fixtures"

# Whether TOOL is an executable on PATH or in the sbin/bin folders (a normal user's PATH
# often lacks /usr/sbin, where ip and iptables live; the harness looks there too).
have_tool() {
    command -v "$1" >/dev/null 2>&1 && return 0
    local dir
    for dir in /usr/sbin /sbin /usr/bin /bin; do
        [ -x "$dir/$1" ] && return 0
    done
    return 1
}

# The browser the browser test would use (it looks for the same names on PATH).
have_chromium() {
    local name
    for name in chromium chromium-browser google-chrome; do
        command -v "$name" >/dev/null 2>&1 && return 0
    done
    return 1
}

# Whether prerequisite NAME is present.
present() {
    case "$1" in
        root) [ "$(id -u)" = 0 ] ;;
        sshd) [ -x /usr/sbin/sshd ] ;;
        chromium) have_chromium ;;
        fixtures) [ -d "$FIXTURES" ] ;;
        cc | node | ip | iptables | python3 | ssh | ssh-keygen) have_tool "$1" ;;
        *) echo "prerequisites.sh: unknown prerequisite $1" >&2; return 2 ;;
    esac
}

# The Debian package that provides NAME (nothing for root and the fixtures).
package_of() {
    case "$1" in
        cc) echo gcc ;;
        node) echo nodejs ;;
        ip) echo iproute2 ;;
        iptables) echo iptables ;;
        python3) echo python3 ;;
        sshd) echo openssh-server ;;
        ssh | ssh-keygen) echo openssh-client ;;
        chromium) echo chromium ;;
        *) ;;
    esac
}

# How to get NAME, for messages.
how_to_get() {
    case "$1" in
        root) echo "run as root" ;;
        fixtures) echo "put the project's shared folder (with fixtures/porcupine) beside the checkout: $FIXTURES" ;;
        *) echo "apt-get install $(package_of "$1")" ;;
    esac
}

# The missing prerequisites, space-separated (empty when everything is here).
missing_prerequisites() {
    local name out=()
    for name in $ALL_PREREQUISITES; do
        present "$name" || out+=("$name")
    done
    echo "${out[*]}"
}

# The Debian packages that provide the missing prerequisites, space-separated, each once.
missing_packages() {
    local name package out=()
    for name in $(missing_prerequisites); do
        package="$(package_of "$name")"
        [ -n "$package" ] || continue
        case " ${out[*]} " in *" $package "*) ;; *) out+=("$package") ;; esac
    done
    echo "${out[*]}"
}
