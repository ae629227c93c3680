#!/bin/sh
# Embeds template headers into lynxgen: TABLE_NAME then the files. Emits C
# with one string per file and a table {name, text, length}, in the order given.
table=$1
shift
i=0
for f in "$@"; do
  sh "$(dirname "$0")/embed.sh" "${table}_$i" < "$f"
  i=$((i + 1))
done
echo "#include \"emit/emit.h\""
printf 'const lx_template %s[] = {\n' "$table"
i=0
for f in "$@"; do
  printf '  {"%s", %s_%d_text, sizeof %s_%d_text - 1},\n' "$(basename "$f")" "$table" "$i" "$table" "$i"
  i=$((i + 1))
done
printf '};\nconst int %s_count = %d;\n' "$(echo "$table" | sed 's/s$//')" "$i"
