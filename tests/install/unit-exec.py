#!/usr/bin/env python3
"""Run one command of an installed systemd unit inside a root, as systemd would start
it there: the unit's User=, Group=, SupplementaryGroups= (plus the user's own groups),
UMask=, Environment= and EnvironmentFile= (files override Environment=), specifiers
%i/%n and $VAR / ${VAR} expansion. The sandboxing options are not applied: this checks
that the command line, the user, the files and the permissions the unit relies on work
together, for roots without a running systemd (tests/install/host-package.sh).

    unit-exec.py ROOT UNIT_FILE KEY [INSTANCE]     KEY: ExecStart, ExecReload, ...

Execs `chroot --userspec=... ROOT env -i ... sh -c 'umask ...; exec "$@"'`, so the
process id stays the command's own.
"""

import os
import re
import shlex
import sys


def parse_unit(text):
    """[Service] settings in order, as (key, value) pairs, continuation lines joined."""
    out, section, pending = [], None, ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if section == "Service" and "=" in line:
            k, v = line.split("=", 1)
            out.append((k.strip(), v.strip()))
    return out


def parse_env_assignments(value):
    """Environment=A=1 "B=two words" -> {A: 1, B: two words}."""
    env = {}
    for word in shlex.split(value):
        if "=" in word:
            k, v = word.split("=", 1)
            env[k] = v
    return env


def parse_env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;" or "=" not in line:
                continue
            k, v = line.split("=", 1)
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                v = v[1:-1]
            env[k.strip()] = v
    return env


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    root, unit_file, key = sys.argv[1:4]
    instance = sys.argv[4] if len(sys.argv) == 5 else ""
    name = os.path.basename(unit_file)
    if instance:
        name = name.replace("@.", f"@{instance}.")
    spec = {"i": instance, "I": instance, "n": name, "%": "%"}

    def specifiers(s):
        return re.sub(r"%(.)", lambda m: spec.get(m.group(1), m.group(0)), s)

    settings = [(k, specifiers(v)) for k, v in parse_unit(open(unit_file).read())]
    user, group, groups, umask = "root", None, [], "0022"
    env, file_env, command = {}, {}, None
    for k, v in settings:
        if k == "User":
            user = v
        elif k == "Group":
            group = v
        elif k == "SupplementaryGroups":
            groups += v.split()
        elif k == "UMask":
            umask = v
        elif k == "Environment":
            env.update(parse_env_assignments(v))
        elif k == "EnvironmentFile":
            optional = v.startswith("-")
            path = os.path.join(root, v.lstrip("-").lstrip("/"))
            if os.path.exists(path):
                file_env.update(parse_env_file(path))
            elif not optional:
                sys.exit(f"unit-exec: {name}: EnvironmentFile {v} is missing")
        elif k == key:
            command = v
    if command is None:
        sys.exit(f"unit-exec: {name} has no {key}=")
    env.update(file_env)
    command = command.lstrip("-+@!:")

    argv = []
    for word in shlex.split(command):
        whole = re.fullmatch(r"\$\{(\w+)\}", word)
        split = re.fullmatch(r"\$(\w+)", word)
        if whole:
            argv.append(env.get(whole.group(1), ""))
        elif split:
            argv += env.get(split.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))

    # Numeric ids from the root's own databases (chroot would look names up outside).
    def table(name):
        with open(os.path.join(root, "etc", name)) as f:
            return [l.rstrip("\n").split(":") for l in f if l.count(":") >= 3]

    passwd, group_db = table("passwd"), table("group")
    pw = next((p for p in passwd if p[0] == user), None)
    if pw is None:
        sys.exit(f"unit-exec: {name}: no user {user} in the root")
    gid_of = {g[0]: g[2] for g in group_db}
    for g in [group] + groups if group else groups:
        if g not in gid_of:
            sys.exit(f"unit-exec: {name}: no group {g} in the root")
    # The user's own groups, as initgroups() gives them.
    groups += [g[0] for g in group_db if user in g[3].split(",")]
    gid = gid_of[group] if group else pw[3]
    gids = []
    for g in groups:
        if gid_of[g] not in gids:
            gids.append(gid_of[g])

    exe = ["chroot", f"--userspec={pw[2]}:{gid}"]
    if gids:
        exe.append("--groups=" + ",".join(gids))
    exe += [root, "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
    exe += [f"{k}={v}" for k, v in env.items()]
    exe += ["sh", "-c", f'umask {umask} && exec "$@"', "sh"] + argv
    os.execvp(exe[0], exe)


if __name__ == "__main__":
    main()
