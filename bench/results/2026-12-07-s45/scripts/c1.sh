#!/usr/bin/env bash
# Session 45, call 1: session 44's next-c1.sh as it was prepared (it already names its call s45c1). The call ran a
# copy of it under this name, the same commands; the copy is replaced by this line to keep one text of it.
exec bash "$(dirname "$0")/../../2026-12-06-s44/scripts/next-c1.sh"
