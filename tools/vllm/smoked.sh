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

exit_if_installed() {  # STAMP_FILE VENV STAMP_TEXT
    # The installer's own early exit: when its stamp file says this install is done, exit 0, at
    # once if the smoke test already passed on the venv as it is now, else once the caller's
    # `smoke` passes (then recorded). Uses the caller's `log` and `smoke`.
    [[ -f "$1" && "$(cat "$1")" == "$3" ]] || return 0
    if already_smoked "$2" "$3"; then
        log "already installed in $2 (smoke-tested as it is now)"
        exit 0
    fi
    if smoke; then
        record_smoked "$2" "$3"
        log "already installed in $2"
        exit 0
    fi
}
