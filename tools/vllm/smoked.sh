# Sourced by install-cpu.sh and install-cpu-serve.sh: remember that a venv passed its smoke test
# as it is now, so a second run checks in milliseconds instead of importing torch and vLLM again
# (~22 s of CPU per venv, paid by every demo and every test command before).
#
# The record (VENV/.tpwarden-smoked) is the installer's stamp plus a fingerprint of the venv's
# installed distributions (each dist-info folder's name, with its version, and its mtime): a
# package installed, removed or reinstalled since the smoke test changes it, and the next run
# smoke-tests again. The stamp itself is left as it was (lab/engine.py hashes it into the image).

packages_fingerprint() {  # VENV
    stat -c '%n %Y' "$1"/lib/python3*/site-packages/*.dist-info | sha256sum | cut -d' ' -f1
}

already_smoked() {  # VENV STAMP_TEXT: the last smoke test passed on this very install
    [[ -f "$1/.tpwarden-smoked" ]] \
        && [[ "$(cat "$1/.tpwarden-smoked")" == "$2 packages=$(packages_fingerprint "$1")" ]]
}

record_smoked() {  # VENV STAMP_TEXT
    echo "$2 packages=$(packages_fingerprint "$1")" >"$1/.tpwarden-smoked"
}
