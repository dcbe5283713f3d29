"""Sizes as the benchmarks read and print them ("4K", "64M" -> bytes -> "4 KiB"); no imports, so
a script run in a venv without hvlite (bench_mpis.py's side MPIs) can use them."""
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(s):
    s = s.strip().upper().rstrip("IB")
    mult = UNITS.get(s[-1], 1)
    return int(float(s[:-1] if s[-1] in UNITS else s) * mult)


def human(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m:
            return f"{n / m:g} {unit}"
    return f"{n} B"
