#!/bin/sh
# Turns standard input into a C string constant NAME_text and its NAME_length.
name=$1
printf 'const char %s_text[] =\n' "$name"
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/  "/' -e 's/$/\\n"/'
printf ';\nconst unsigned long %s_length = sizeof %s_text - 1;\n' "$name" "$name"
