"""What hvliterun accepts as a host name (from -H, a hostfile or a discovery script): a name or
an IPv4 address, letters, digits, '.', '-' and '_', not beginning with '-' or '.', so that no
entry reaches mpiexec's command line (hydra's -hosts, Open MPI's -H) as one of its options."""
import re

HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")


def bad_host_name(name):
    """Why `name` is not a host name (a phrase naming it), or None."""
    if HOST_NAME.fullmatch(name):
        return None
    if name.startswith(("-", ".")):
        why = f"begins with {name[0]!r}"
    elif len(name) > 253:
        why = "is longer than 253 characters"
    else:
        why = f"holds {next(c for c in name if not re.fullmatch(r'[A-Za-z0-9_.-]', c))!r}"
    return (f"{name!r} is not a host name (it {why}; a host name is letters, digits, '.', '-' "
            "and '_', beginning with a letter, digit or '_')")
