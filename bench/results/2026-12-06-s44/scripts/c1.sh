#!/usr/bin/env bash
# Session 44, call 1: session 43's next-c1.sh as it was prepared (it already names its call s44c1). The call ran a
# copy of it under this name, the same commands; the copy is replaced by this line to keep one text of it.
exec bash "$(dirname "$0")/../../2026-12-06-s43/scripts/next-c1.sh"
