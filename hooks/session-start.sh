#!/bin/sh
# retained: session-start hook. Prints the memory brief (what the store holds:
# checkpoints, then the newest records, within a token budget) for the host to
# add to the new session's context.
#
#   session-start.sh [text|claude]
#
# text (the default) prints the brief as plain text; claude prints the JSON a
# Claude Code SessionStart hook may print instead:
#   {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "..."}}
#
# It never fails or blocks the host: whatever happens it prints the brief or
# one factual line, and exits 0. If retained is not installed, or the store is
# missing, empty or damaged, that one line says so. The brief itself is given
# RETAINED_HOOK_TIMEOUT seconds; the hook's JSON on stdin, 2.
#
# The hook's JSON on stdin (when present) names the session's "source":
# startup, resume, clear, compact or fork. After compact (the conversation was
# just summarised) and on resume (the conversation is still there) the brief
# is shorter.
#
# Environment:
#   RETAINED_DIR           the store (default ~/.retained); retained reads it
#   RETAINED_BRIEF_BUDGET  token budget on startup, clear and fork (default 1500)
#   RETAINED_HOOK_TIMEOUT  seconds the brief may take (default 5)
#   RETAINED_BIN           the retained command to run (default: retained on
#                          PATH); "retained hook install" sets it to the
#                          command of the install the hook came with
#   RETAINED_PYTHON        the python to run "-m retained" with when neither
#                          is there (default python3)
#
# POSIX sh only; no jq (the one field read from stdin is matched with sed).

format=${1:-text}
case $format in
  text | claude) ;;
  *) format=text ;;
esac

say() {
  # One factual line, in the chosen format. Quotes, backslashes and control
  # characters are dropped, so the line needs no JSON escaping.
  s_line=$(printf '%s' "$1" | tr -d '"\\\000-\037')
  if [ "$format" = claude ]; then
    printf '{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"%s"}}\n' "$s_line"
  else
    printf '%s\n' "$s_line"
  fi
}

bounded() {
  # bounded SECONDS COMMAND...: run COMMAND, its stdin from fd 3, and stop it
  # after SECONDS. timeout(1) when there is one; otherwise a background sleep
  # that kills it (its output goes to /dev/null so a command substitution
  # around this does not wait for it).
  b_secs=$1
  shift
  if command -v timeout >/dev/null 2>&1; then
    timeout "$b_secs" "$@" <&3
    return $?
  fi
  "$@" <&3 &
  b_pid=$!
  (sleep "$b_secs" && kill "$b_pid") >/dev/null 2>&1 </dev/null &
  b_killer=$!
  wait "$b_pid"
  b_status=$?
  kill "$b_killer" 2>/dev/null
  return $b_status
}

# The hook's JSON, if any: at most 64 lines of 64 KiB, within 2 seconds.
# (A closed stdin is skipped: the subshell test keeps a failed redirection
# from ending the script.)
input=
if [ ! -t 0 ] && (exec 4<&0) 2>/dev/null; then
  exec 3<&0
  input=$(bounded 2 head -n 64 2>/dev/null | cut -c 1-65536)
  exec 3<&-
fi
source=$(printf '%s\n' "$input" | tr -d '\r\n' |
  sed -n 's/.*"source"[[:space:]]*:[[:space:]]*"\([a-z]*\)".*/\1/p')

budget=${RETAINED_BRIEF_BUDGET:-1500}
case $budget in
  '' | *[!0-9]*) budget=1500 ;;
esac
case $source in
  compact) [ "$budget" -gt 600 ] && budget=600 ;;
  resume) [ "$budget" -gt 1000 ] && budget=1000 ;;
esac

limit=${RETAINED_HOOK_TIMEOUT:-5}
case $limit in
  '' | *[!0-9]* | 0 | 00*) limit=5 ;; # timeout(1) takes 0 to mean no limit at all
esac

if [ -n "${RETAINED_BIN:-}" ]; then
  if [ ! -x "$RETAINED_BIN" ]; then
    say "retained memory: not available (RETAINED_BIN names $RETAINED_BIN, which is not an executable file); no brief."
    exit 0
  fi
  set -- "$RETAINED_BIN" brief
elif command -v retained >/dev/null 2>&1; then
  set -- retained brief
else
  py=${RETAINED_PYTHON:-python3}
  if ! command -v "$py" >/dev/null 2>&1; then
    say "retained memory: not available (no retained command and no $py on PATH); no brief."
    exit 0
  fi
  set -- "$py" -m retained brief
fi

out=$(bounded "$limit" "$@" --budget "$budget" --format "$format" 3</dev/null 2>/dev/null)
status=$?
if [ "$status" -eq 0 ] && [ -n "$out" ]; then
  printf '%s\n' "$out"
elif [ "$status" -eq 124 ] || [ "$status" -eq 143 ]; then
  say "retained memory: the brief did not finish within $limit seconds; no brief."
elif [ "$status" -eq 0 ]; then
  say "retained memory: the brief was empty."
else
  say "retained memory: not available ($1 exited with status $status); no brief."
fi
exit 0
