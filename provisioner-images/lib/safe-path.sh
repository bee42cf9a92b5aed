# Shared by the shipped provisioner images' entrypoints (sourced, never run): validation of
# parameters and path handling that stays safe on a filesystem others can write to.
#
# Written for POSIX sh with the tools of busybox 1.35 (Debian's busybox-static, and
# alpine's) as well as GNU coreutils and findutils: realpath, readlink, find -xdev -mindepth
# -depth -exec {} +, stat -c, sort, awk, mv -T, mktemp -d, date -u +FORMAT. It uses none of
# `date +%N`, `rm --one-file-system`, `find -delete` or `comm`: some busybox builds lack
# them.
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
# MODE=find, WALKED is empty when a component is missing (the directory is gone). With
# MODE=create, CREATED is the directory's path when this call made it (empty when it was
# there already): only a directory made by this attempt is removed when the attempt fails.
# Directories it makes get the default mode; the caller sets the final one's.
walk_below() {
    WALKED=
    [ "$3" != create ] || CREATED=
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
            if mkdir -- "$_p" 2>/dev/null && [ -z "$_rest" ]; then
                CREATED=$_p
            fi
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
        # A directory the kubelet made (a per-volume mount) belongs to root: a non-root
        # image cannot chmod it, and need not when its mode is already the one asked for.
        _want=${1#0}
        [ "$(stat -c %a . 2>/dev/null)" = "${_want#0}" ] && exit 0
        chmod "$1" . 2>/dev/null && exit 0
        [ "$(stat -c %u . 2>/dev/null)" = "$(id -u)" ] || exit 4
        exit 1
    ) || {
        _rc=$?
        [ "$_rc" -ne 3 ] || fail 2 "refusing $4: it moved outside the base; its mode was not changed"
        # Made by the kubelet (volume-base) or another user: no retry changes its owner.
        [ "$_rc" -ne 4 ] || fail 2 "cannot set mode $1 on $4: it has mode $(stat -c %a -- "$2" 2>/dev/null) and belongs to uid $(stat -c %u -- "$2" 2>/dev/null), not to this image's uid $(id -u); set dir-mode to its mode, or give the base the mode new volumes need (the kubelet gives a volume's directory the base's mode)"
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
    empty_dir "$1" "$2" "$3"
    rmdir -- "$1" || fail 1 "cannot remove $3"
}

# empty_dir DIR BASE SHOWN: removes everything in the directory DIR (a real path strictly
# below the real path BASE) as remove_tree does, and keeps DIR. Works from inside DIR.
empty_dir() {
    _err=$(
        cd -P -- "$1" || exit 1
        # From inside: the working directory is pinned, check it once more.
        _here=$(pwd -P)
        if [ "$_here" = "$2" ] || ! is_under "$2" "$_here"; then
            exit 3
        fi
        find . -xdev -mindepth 1 ! -type d -exec rm -f -- {} + 2>&1 || exit 1
        find . -xdev -mindepth 1 -depth -type d -exec rmdir -- {} + 2>&1 || exit 1
    ) || {
        _rc=$?
        [ "$_rc" -ne 3 ] || fail 2 "refusing to empty $3: it moved outside the base meanwhile"
        _first=$(printf '%s\n' "$_err" | head -n 1)
        _lacks=$(root_lacks DAC_OVERRIDE FOWNER)
        [ -z "$_lacks" ] || fail 1 "cannot remove everything in $3 (files of another user?): $(printable "$_first"); the Job's pod runs as root without the capabilities $_lacks, which removing them needs; grant them in the class's pod-template"
        fail 1 "cannot remove everything in $3 (files of another user?): $(printable "$_first")"
    }
}

# remove_empty_parents DIR BASE: removes the directories between DIR (a path below the
# real path BASE, already removed) and BASE that are empty, innermost first, so that a
# namespace's parent directory goes with its last volume. A directory still in use (a
# volume provisioned into it meanwhile) is not empty and stays; BASE always stays.
remove_empty_parents() {
    _d=${1%/*}
    while [ "$_d" != "$2" ] && is_under "$2" "$_d"; do
        rmdir -- "$_d" 2>/dev/null || return 0
        _d=${_d%/*}
    done
}

# root_lacks CAP...: as missing_capabilities, for a process running as root; empty for
# any other user (whose files it may touch is up to their owners, not to capabilities).
root_lacks() {
    [ "$(id -u 2>/dev/null)" = 0 ] || return 0
    missing_capabilities "$@"
}

# missing_capabilities CAP...: those of the named capabilities (CHOWN, DAC_OVERRIDE,
# FOWNER, FSETID) that this process does not have in its effective set, blank-separated;
# empty when it has them all or when /proc does not say.
missing_capabilities() {
    _eff=
    while read -r _k _v; do
        [ "$_k" = CapEff: ] && _eff=$_v
    done < /proc/self/status 2>/dev/null
    [ -n "$_eff" ] || return 0
    _missing=
    for _cap in "$@"; do
        case $_cap in
            CHOWN) _bit=0 ;;
            DAC_OVERRIDE) _bit=1 ;;
            FOWNER) _bit=3 ;;
            FSETID) _bit=4 ;;
            *) continue ;;
        esac
        [ $(( (0x$_eff >> _bit) & 1 )) -eq 1 ] || _missing="$_missing $_cap"
    done
    printf '%s' "${_missing# }"
}

# remove_created_on_failure BASE: the EXIT trap of a provisioning attempt. When the attempt
# fails after making the volume's directory (CREATED, a path below the real path BASE), it
# removes the directory and what was copied into it, and the parents left empty, so that a
# failed attempt leaves no storage behind (a retry makes it again). A directory it found
# empty (FRESH, see fresh_unless_created) is emptied instead.
remove_created_on_failure() {
    _status=$?
    if [ "$_status" -ne 0 ] && [ -n "${CREATED:-}" ] && [ -d "$CREATED" ] && [ ! -L "$CREATED" ]; then
        _created=$CREATED
        CREATED=
        # In a subshell whose messages go nowhere: the attempt's own failure stays the
        # termination message.
        (TERMINATION_LOG=/dev/null; remove_tree "$_created" "$1" "$_created") >/dev/null 2>&1 \
            && remove_empty_parents "$_created" "$1"
    elif [ "$_status" -ne 0 ] && [ -n "${FRESH:-}" ] && [ -d "$FRESH" ] && [ ! -L "$FRESH" ]; then
        _fresh=$FRESH
        FRESH=
        (TERMINATION_LOG=/dev/null; empty_dir "$_fresh" "$1" "$_fresh") >/dev/null 2>&1 || true
    fi
    exit "$_status"
}

# fresh_unless_created DIR: DIR (found by walk_below) was there before this attempt and is
# empty (a per-volume mount the kubelet made, which no pod can remove from inside): a
# failed attempt empties it again (FRESH) where it would remove a directory it made.
fresh_unless_created() {
    FRESH=
    [ -z "${CREATED:-}" ] || return 0
    [ -z "$(ls -A -- "$1" 2>/dev/null)" ] || return 0
    FRESH=$1
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

# snapshots_only_for_snapshots ACTION DIR: a snapshot's Jobs work exactly in
# .snapshots/<namespace>/<uid>, and no other Job ever works in .snapshots (where the
# class's snapshots are kept, whatever a DIRECTORY parameter renders to). Exit 2 otherwise.
snapshots_only_for_snapshots() {
    case "$1" in
        snapshot|delete-snapshot)
            case "$2" in
                .snapshots/*/*/*|.snapshots/*//*|.snapshots//*|*/) ;;
                .snapshots/?*/?*) return 0 ;;
            esac
            fail 2 "a snapshot's directory is .snapshots/<namespace>/<uid>, not '$(printable "$2")'"
            ;;
        *)
            case "$2" in
                .snapshots|.snapshots/*) fail 2 "the directory '$(printable "$2")' lies in .snapshots, where the class's snapshots are kept" ;;
            esac
            ;;
    esac
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
    _from=$WALKED
    empty_dir "$_dest" "$1" "the new volume"
    # Failures to keep an owner or a mode (GNU cp exits 1 on them, busybox's cp 0) are
    # told by the check below, which names the first file; any other failure is told here.
    if ! _err=$(cp -a -- "$_from/." "$_dest/" 2>&1); then
        _first=$(printf '%s\n' "$_err" | grep -v "preserve" | head -n 1)
        [ -z "$_first" ] || copy_failed "$_src" "$_first"
    fi
    same_owners_and_modes "$_from" "$_dest" "$_src"
    WALKED=$_dest
}

# copy_failed SHOWN ERROR: stops a copy of SHOWN that failed with ERROR (its first line):
# permanently (exit 2) when the pod runs as root without a capability a copy of other
# users' files needs, naming them; transiently (exit 1) otherwise.
copy_failed() {
    _lacks=$(root_lacks DAC_OVERRIDE CHOWN FOWNER FSETID)
    [ -z "$_lacks" ] || fail 2 "copying $1 into the new volume failed ($(printable "$2")): the Job's pod runs as root without the capabilities $_lacks, which copying other users' private files as they are needs; grant them in the class's pod-template"
    fail 1 "copying $1 into the new volume failed: $(printable "$2")"
}

# same_owners_and_modes SOURCE COPY SHOWN: checks that every entry of the directory COPY
# has the owner, group and mode (setuid, setgid and sticky bits included) of the entry of
# the same name in SOURCE, as `cp -a` meant to keep them: without CHOWN or FSETID a copy
# silently gets the copier's owner or loses its setgid bit, and busybox's cp still exits 0.
# Entries that left SOURCE meanwhile are not compared. Exit 2 (naming the capabilities the
# pod lacks) or 1 (something changed the source during the copy) on a difference.
same_owners_and_modes() {
    _lists=$(mktemp -d) || fail 1 "cannot make a temporary directory to check the copy"
    # Unreadable parts of the source (busybox's cp skips them and exits 0) fail the listing.
    if ! (cd -P -- "$1" && find . -xdev -mindepth 1 -exec stat -c '%u:%g:%a %n' {} +) \
        > "$_lists/source.raw" 2> "$_lists/error"; then
        _first=$(head -n 1 "$_lists/error")
        rm -rf -- "$_lists"
        copy_failed "$3" "$_first"
    fi
    sort "$_lists/source.raw" > "$_lists/source"
    (cd -P -- "$2" && find . -xdev -mindepth 1 -exec stat -c '%u:%g:%a %n' {} + | sort) > "$_lists/copy" \
        || { rm -rf -- "$_lists"; fail 1 "cannot list the owners and modes of the copy of $3"; }
    _diff=$(awk 'NR == FNR { src[substr($0, index($0, " ") + 1)] = $1; next }
        { n = substr($0, index($0, " ") + 1)
          if ((n in src) && src[n] != $1) { print n " is " src[n] " in the source and " $1 " in the copy"; exit } }' \
        "$_lists/source" "$_lists/copy")
    rm -rf -- "$_lists"
    [ -n "$_diff" ] || return 0
    _lacks=$(root_lacks DAC_OVERRIDE CHOWN FOWNER FSETID)
    [ -z "$_lacks" ] || fail 2 "the copy of $3 cannot keep owners and modes ($(printable "$_diff"), as uid:gid:mode): the Job's pod runs as root without the capabilities $_lacks; grant them in the class's pod-template"
    [ "$(id -u 2>/dev/null)" = 0 ] || fail 2 "the copy of $3 cannot keep owners and modes ($(printable "$_diff"), as uid:gid:mode): only root with the CHOWN capability can give files to other users; run the class's Jobs as root or clone volumes of one owner"
    fail 1 "the copy of $3 does not keep owners and modes ($(printable "$_diff"), as uid:gid:mode); was the source changed during the copy?"
}
