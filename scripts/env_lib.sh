# Sourced by setup_envs.sh, setup_version_env.sh and lock.sh: how an embedded environment is made from its lock.
# A lock (requirements*.lock beside its requirements*.txt) pins every package, dependencies included, with its
# hashes; `bash scripts/lock.sh` makes it from the requirements, and set-up installs exactly it, with uv.
# Expects: root (the repository), venvs (where environments go), python (the interpreter they are made from).

# uv, the installer: one pinned version, bootstrapped from PyPI into $venvs/.uv by pip (the one place pip serves).
UV_VERSION=0.13.9
ensure_uv() {
  local home=$venvs/.uv
  UV=$home/bin/uv
  if [ -x "$UV" ] && [ "$("$UV" --version 2>/dev/null | cut -d' ' -f2)" = "$UV_VERSION" ]; then
    export FWBENCH_UV=$UV
    return
  fi
  rm -rf "$home"
  PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --disable-pip-version-check --target "$home" "uv==$UV_VERSION" \
    || { echo "installing uv $UV_VERSION from PyPI failed" >&2; return 1; }
  export FWBENCH_UV=$UV
}

# The lock of a requirements file: requirements.txt -> requirements.lock, requirements-test.txt -> requirements-test.lock.
lock_of() { echo "${1%.txt}.lock"; }

# What a lock was made from: the requirements file and the files its "-r" lines include, hashed.
inputs_hash() {
  local requirements=$1 included
  included=$(sed -n "s|^-r |$(dirname "$requirements")/|p" "$requirements")
  cat "$requirements" $included | sha256sum | cut -d' ' -f1
}
LOCK_HEADER="# fwbench lock; inputs sha256:"

# Refuse, with the command that remakes it, a lock that is missing or was made from other requirements.
check_lock() {
  local requirements=$1 lock; lock=$(lock_of "$1")
  if [ ! -f "$lock" ]; then
    echo "no lock for $requirements ($lock is missing); make it with: bash scripts/lock.sh" >&2
    return 2
  fi
  if [ "$(head -n 1 "$lock")" != "$LOCK_HEADER $(inputs_hash "$requirements")" ]; then
    echo "$lock no longer matches $requirements (it was made from other requirements); remake it with: bash scripts/lock.sh" >&2
    return 2
  fi
}

# write_lock REQUIREMENTS LOCK: resolve the requirements, every package's version and hashes, for the Python and
# platform every environment and image here has (CPython 3.11, x86-64 Linux), whatever machine runs this.
write_lock() {
  local requirements=$1 lock=$2 body
  body=$(mktemp)
  # uv keeps the versions of the file it writes where they still fit: a lock remade after one requirement changed
  # moves only what that change moves.
  if [ -f "$lock" ]; then tail -n +3 "$lock" > "$body"; fi
  "$UV" pip compile -q "$requirements" --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --custom-compile-command "bash scripts/lock.sh" --no-header -o "$body"
  { echo "$LOCK_HEADER $(inputs_hash "$requirements")"
    echo "# Every package of this environment at its exact version, with hashes, made from $(basename "$requirements") by: bash scripts/lock.sh"
    cat "$body"; } > "$lock"
  rm -f "$body"
}

# make_env NAME ENV LOCK PYPROJECT...: the environment ENV exactly as LOCK says, then the project's own packages
# (editable, no dependencies) and the gRPC stubs; kept as it is while its inputs are unchanged.
make_env() {
  local name=$1 env=$2 lock=$3; shift 3
  local stamp started=$SECONDS
  stamp=$(cat "$lock" "$@" protos/generate.py protos/install_stubs.sh protos/fwbench/runner/v1/*.proto \
    "$root/scripts/env_lib.sh" | sha256sum | cut -d' ' -f1)
  if [ -f "$env/.fwbench-stamp" ] && [ "$(cat "$env/.fwbench-stamp")" = "$stamp" ]; then
    echo "[$name] up to date ($env)"
    return
  fi
  echo "[$name] installing $lock into $env"
  rm -rf "$env"
  "$UV" venv -q --python "$python" "$env"
  # Byte-compiled at install, in parallel: where PYTHONDONTWRITEBYTECODE is set (CI hosts, many images) nothing
  # imported is ever cached, and every runner and DDP worker would compile torch or TensorFlow from source again.
  "$UV" pip sync -q --python "$env/bin/python" --require-hashes --compile-bytecode "$lock"
  local packages=()
  for pyproject in "$@"; do packages+=(-e "$(dirname "$pyproject")"); done
  "$UV" pip install -q --python "$env/bin/python" --no-deps "${packages[@]}"
  sh "$root/protos/install_stubs.sh" "$env/bin/python"
  # What a runner reports in Describe, so that every result names the environment it ran in.
  sha256sum "$lock" | cut -d' ' -f1 > "$env/fwbench-lock.sha256"
  echo "$stamp" > "$env/.fwbench-stamp"
  echo "[$name] ready"
  if [ -n "${FWBENCH_TIMINGS:-}" ]; then printf 'setup\tenvironment %s\t%s\n' "$name" $((SECONDS - started)) >> "$FWBENCH_TIMINGS"; fi
}
