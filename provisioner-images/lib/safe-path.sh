# Shared by the shipped provisioner images' entrypoints (sourced, never run): validation of
# parameters and path handling that stays safe on a filesystem others can write to.
#
# Written for POSIX sh with the tools of alpine's busybox as well as GNU coreutils and
# findutils: realpath, readlink, find -xdev -mindepth -depth -exec {} +, mv -T, mktemp -d,
# date -u +FORMAT. It uses neither `date +%N` nor `rm --one-file-system`: busybox has
# neither.
#
# The entrypoint sets IMAGE (the prefix of its log lines) before sourcing this file.
#
# Exit codes, as the image contract has them: 2 permanent (refused: the parameters or the
# filesystem are wrong and a retry cannot help), 1 transient.

# Byte semantics for patterns and lengths, whatever locale the pod has.
LC_ALL=C
export LC_ALL

# The characters a path parameter may hold; spelt out, not as ranges, so no locale widens
# them. The `-` must stay last.
SAFE_PATH_CHARS='ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/-'

# fail CODE MESSAGE: report to the claim's events (the termination log) and stop.
fail() {
    printf '%s\n' "$2" > "${TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null || true
    printf '%s: %s\n' "${IMAGE:-entrypoint}" "$2" >&2
    exit "$1"
}

# printable TEXT: TEXT with every control character shown as `?`, for messages.
printable() {
    printf '%s' "$1" | tr '\001-\037\177' '?'
}

# has_control TEXT: true when TEXT holds a control character (newline, tab, escape, ...).
# Line-based tools (grep, sed) cannot see a newline inside a value; this can.
has_control() {
    [ "$(printf '%s' "$1" | tr -d '\001-\037\177')" != "$1" ]
}

# no_control PARAM VALUE: refuses (exit 2) a value with a control character. PARAM is a
# ConfigMap key (kebab-case) or the name of a variable the Job sets (upper case).
no_control() {
    if has_control "$2"; then
        case $1 in
            *[abcdefghijklmnopqrstuvwxyz]*) _what="parameter $1" ;;
            *) _what=$1 ;;
        esac
        fail 2 "$_what contains a control character (newline, tab, ...): '$(printable "$2")'; values must be one line of plain text"
    fi
}

# only_chars PARAM VALUE CHARS WHAT: refuses (exit 2) a control character, then any
# character of VALUE that is not one of CHARS (a bracket-expression list: letters spelt
# out, `-` last); WHAT names the allowed set in the message. The whole value is matched,
# not line by line.
only_chars() {
    no_control "$1" "$2"
    case $2 in
        *[!$3]*) fail 2 "parameter $1 '$2' has characters other than $4" ;;
    esac
}

# check_relative_path PARAM VALUE UNDER: a path below a base (UNDER names the base in
# messages, e.g. "base-path '/srv'"): not absolute, plain characters only, no `.` or `..`
# component, no component longer than 255 bytes. Exit 2 otherwise.
check_relative_path() {
    [ -n "$2" ] || fail 2 "parameter $1 is empty"
    no_control "$1" "$2"
    case $2 in
        /*) fail 2 "parameter $1 '$2' must be relative to $3" ;;
    esac
    case $2 in
        *[!$SAFE_PATH_CHARS]*) fail 2 "parameter $1 '$2' has characters other than A-Z a-z 0-9 . _ - /; sanitise claim text with {{dnslabel ...}}" ;;
    esac
    case "/$2/" in
        */../*|*/./*) fail 2 "parameter $1 '$2' escapes $3" ;;
    esac
    _rest=$2
    while [ -n "$_rest" ]; do
        _c=${_rest%%/*}
        case $_rest in */*) _rest=${_rest#*/} ;; *) _rest= ;; esac
        [ "${#_c}" -le 255 ] || fail 2 "parameter $1 has a component longer than 255 bytes: '$_c'"
    done
}

# check_absolute_path PARAM VALUE [HINT]: an absolute path of plain characters, without `.`
# or `..` components and other than `/`. HINT follows "must be an absolute path" in the
# message. Exit 2 otherwise.
check_absolute_path() {
    no_control "$1" "$2"
    case $2 in
        /*) ;;
        *) fail 2 "parameter $1 must be an absolute path${3:-}, got '$2'" ;;
    esac
    case $2 in
        *[!$SAFE_PATH_CHARS]*) fail 2 "parameter $1 '$2' has characters other than A-Z a-z 0-9 . _ - /" ;;
    esac
    case "$2/" in
        */../*|*/./*) fail 2 "parameter $1 '$2' has a '.' or '..' component" ;;
    esac
    case $2 in
        *[!/]*) ;;
        *) fail 2 "parameter $1 must not be the root directory" ;;
    esac
}

# real_dir PATH: the real path (no symbolic link, no `.`/`..`) of the directory PATH.
real_dir() {
    realpath "$1" 2>/dev/null || readlink -f "$1"
}

# is_under BASE PATH: true when PATH (a real path) is BASE (a real path) or below it.
is_under() {
    case $1 in
        /) return 0 ;;
    esac
    case $2 in
        "$1"|"$1"/*) return 0 ;;
    esac
    return 1
}

# walk_below BASE REL MODE SHOWN: finds (MODE=find) or creates (MODE=create) the directory
# REL below BASE, a real path, one component at a time, never following a symbolic link:
# a link at any component (even one pointing back inside the base) is refused with exit 2
# and touched in no way. A component that exists but is not a directory is refused too.
# SHOWN is how BASE is named in messages (a node or export path, not the pod's view).
#
# Sets WALKED to the directory's real path, verified to lie strictly below BASE; with
# MODE=find, WALKED is empty when a component is missing (the directory is gone).
# Directories it makes get the default mode; the caller sets the final one's.
walk_below() {
    WALKED=
    _p=$1
    _shown=$4
    _rest=$2
    while [ -n "$_rest" ]; do
        _c=${_rest%%/*}
        case $_rest in */*) _rest=${_rest#*/} ;; *) _rest= ;; esac
        [ -n "$_c" ] || continue
        _p=$_p/$_c
        _shown=$_shown/$_c
        if [ ! -e "$_p" ] && [ ! -L "$_p" ]; then
            [ "$3" = create ] || return 0
            # Not `mkdir -p`: that would follow a link planted meanwhile. A concurrent
            # creation is checked like any existing component below.
            mkdir -- "$_p" 2>/dev/null || true
        fi
        if [ -L "$_p" ]; then
            fail 2 "refusing $_shown: it is a symbolic link (to '$(printable "$(readlink "$_p")")') and links below $4 are never followed; nothing was changed: remove the link by hand"
        fi
        [ -e "$_p" ] || fail 1 "cannot create $_shown"
        [ -d "$_p" ] || fail 2 "refusing $_shown: it exists and is not a directory; nothing was changed"
    done
    _real=$(real_dir "$_p") || fail 1 "cannot resolve the real path of $_shown"
    if [ "$_real" = "$1" ] || ! is_under "$1" "$_real"; then
        fail 2 "refusing $_shown: its real path '$(printable "$_real")' is not below the base '$1'; nothing was changed"
    fi
    WALKED=$_real
}

# chmod_dir MODE DIR BASE SHOWN: sets the mode of the directory DIR (a real path found by
# walk_below under the real path BASE) from inside it, after checking once more that it is
# strictly below BASE: a link swapped in after the walk cannot redirect the chmod.
chmod_dir() {
    (
        cd -P -- "$2" || exit 1
        _here=$(pwd -P)
        if [ "$_here" = "$3" ] || ! is_under "$3" "$_here"; then
            exit 3
        fi
        chmod "$1" .
    ) || {
        _rc=$?
        [ "$_rc" -ne 3 ] || fail 2 "refusing $4: it moved outside the base; its mode was not changed"
        fail 1 "cannot set mode $1 on $4"
    }
}

# mount_at_or_below DIR: true when a filesystem is mounted at DIR (a real path) or below
# it, as /proc/self/mountinfo says (where there is none, false); sets MOUNTED to one. The
# mount points there escape blanks, newlines and backslashes, so reading by line is exact.
mount_at_or_below() {
    MOUNTED=
    [ -r /proc/self/mountinfo ] || return 1
    while read -r _id _parent _devno _mroot _mpoint _rest; do
        case $_mpoint in
            "$1"|"$1"/*) MOUNTED=$_mpoint; return 0 ;;
        esac
    done < /proc/self/mountinfo
    return 1
}

# remove_tree DIR BASE SHOWN: removes the directory DIR (a real path found by walk_below
# under the real path BASE) and everything in it, without following a symbolic link (a
# link is removed, never what it points to) and without crossing into another filesystem.
# A filesystem mounted at or inside DIR is refused up front (exit 1: unmount it, and the
# retry removes the rest); `find -xdev` guards the same again. The directories go in a
# second, depth-first pass, which busybox's find does not stop at other filesystems: the
# mount check is what keeps that pass on DIR's own. Works from inside DIR, so a component
# above it renamed meanwhile cannot redirect the removal.
remove_tree() {
    if mount_at_or_below "$1"; then
        fail 1 "refusing to remove $3: a filesystem is mounted at $(printable "$MOUNTED"); unmount it first; nothing was removed"
    fi
    (
        cd -P -- "$1" || exit 1
        # From inside: the working directory is pinned, check it once more.
        _here=$(pwd -P)
        if [ "$_here" = "$2" ] || ! is_under "$2" "$_here"; then
            exit 3
        fi
        find . -xdev -mindepth 1 ! -type d -exec rm -f -- {} + || exit 1
        find . -xdev -mindepth 1 -depth -type d -exec rmdir -- {} + || exit 1
    ) || {
        _rc=$?
        [ "$_rc" -ne 3 ] || fail 2 "refusing to remove $3: it moved outside the base while being removed"
        fail 1 "cannot remove everything in $3 (files of another user?)"
    }
    rmdir -- "$1" || fail 1 "cannot remove $3"
}

# archive_dir DIR SHOWN: renames the directory DIR (a real path found by walk_below) to
# `archived-<name>` beside it or, when that name is taken, to a new unique
# `archived-<name>[-<pv name>]-<UTC time>-XXXXXX` (mktemp): never into another archive
# (mv -T never moves into a directory) and never over one. Sets ARCHIVED to the new path.
archive_dir() {
    _parent=${1%/*}
    _name=${1##*/}
    ARCHIVED=$_parent/archived-$_name
    if [ ! -e "$ARCHIVED" ] && [ ! -L "$ARCHIVED" ] && mv -T -- "$1" "$ARCHIVED" 2>/dev/null; then
        return 0
    fi
    _tag=
    case ${PV_NAME:-} in
        ""|*[!abcdefghijklmnopqrstuvwxyz0123456789-]*) ;;
        *) case $_name in *"$PV_NAME"*) ;; *) _tag=-$PV_NAME ;; esac ;;
    esac
    # mktemp reserves a fresh empty directory; mv -T renames DIR over it (rename(2)
    # replaces an empty directory, refuses a non-empty one).
    ARCHIVED=$(mktemp -d "$_parent/archived-$_name$_tag-$(date -u +%Y%m%dT%H%M%SZ)-XXXXXX") \
        || fail 1 "cannot make an archive name for $2"
    if ! mv -T -- "$1" "$ARCHIVED"; then
        rmdir -- "$ARCHIVED" 2>/dev/null || true
        fail 1 "cannot archive $2"
    fi
}

# clone_from REAL_BASE SOURCE_PATH NODE_BASE DEST_REAL: for a clone (the Job has
# SOURCE_PV_JSON), copies the contents of the source volume's directory SOURCE_PATH (its
# path as the PV gives it, which must lie below NODE_BASE, the base as PVs name it) into
# DEST_REAL, the new volume's directory. The source is found by walk_below under REAL_BASE,
# so no link in it is followed; `cp -a` copies links inside it as links, never their
# targets. What an earlier, interrupted attempt copied is removed first (find does not
# follow links): a link it left would otherwise let this copy write through it.
# Exit 2 when the source is elsewhere or gone, 1 when the copy fails.
clone_from() {
    _src=$2
    no_control "source volume path" "$_src"
    case "$_src" in
        "$3"/*) ;;
        *) fail 2 "the source volume's path $(printable "$_src") is not below $3, so it cannot be copied from here" ;;
    esac
    _rel=${_src#"$3"/}
    check_relative_path "source volume path" "$_rel" "$3"
    _dest=$4
    walk_below "$1" "$_rel" find "$3"
    [ -n "$WALKED" ] || fail 2 "the source volume's directory $_src is not here (another node, or gone)"
    find "$_dest" -mindepth 1 -delete || fail 1 "cannot empty the new volume before copying into it"
    cp -a -- "$WALKED/." "$_dest/" || fail 1 "copying $_src into the new volume failed"
    WALKED=$_dest
}
