"""Reading the emitted stage files as statements.

The printers continue a statement longer than 120 columns on lines indented
four columns past it, each line but the last ending in a comma
(gen/emit/emit_file.c); tests that look at whole calls join them back."""


def unwrapped(text):
    """`text` with every continued statement on one line, as printed before wrapping."""
    lines, base = [], None
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        if lines and lines[-1].endswith(",") and line.strip() and indent == base + 4:
            lines[-1] += " " + line.strip()
            continue
        lines.append(line)
        base = indent
    return "\n".join(lines)
