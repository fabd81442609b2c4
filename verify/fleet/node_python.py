"""Find the node's torch: the interpreter the node run (and every GPU engine it starts) uses, found as an
operator would find it, trust-checked as root imports are (issue 40 item 6), nothing of it run before it is
checked (issue 53 item 7).

`python3 -I -S -c BOOTSTRAP WORKDIR EXTRA verify.fleet.node_python [--wanted PATH] --out FILE` (roles/verify_node/
tasks/find_python.yml) runs as the system Python with neither the environment nor `site` (standard library only:
no .pth file of any site-packages runs), and tries, in order: the inventory's `verify_node_python` when set (then
that one alone), else `python3` on root's login PATH (root's login shell asked `command -v python3`, on the node),
then the interpreter Ansible runs this module with on the node (ansible_python_interpreter, or the controller's
python3 on PATH with a connection local), then /usr/bin/python3. Each candidate is probed in steps, each only
after what it runs was checked (verify.safe_io: owner root or us, no group, other or ACL writer, default ACLs
included, on every directory and file of each tree):
1. the interpreter file and every directory above it, through each link (a venv's python is a link to the base
   interpreter; the link is followed only when root owns it), a venv's own directories and pyvenv.cfg, and the
   standard library beside the interpreter it resolves to (<prefix>/lib/python3*), walked;
2. it runs with `-I -S` (its standard library only) and says its site directories (site.getsitepackages, without
   running site) and its path;
3. each site directory is walked, and each directory its .pth files add (read here, never run);
4. it runs with `site` (its .pth files and sitecustomize, from the trees just checked) and says its sys.path, each
   entry walked;
5. only then it imports torch (with the trusted extra directories), and every directory on its sys.path then
   is checked again.
The first that imports torch is used; the answer (JSON) names it and every candidate tried with what happened,
for the report's run facts and for the GPU rows' "could not be checked" when none can (verify.bench: no
interpreter imports torch on a node with GPUs is ERROR, not SKIP).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import sys
from typing import Optional, Sequence

from verify.runner import clean_env, run_command
from verify.safe_io import (
    UnsafePathError,
    check_dir_trusted,
    check_file_trusted,
    check_tree_trusted,
    read_trusted_file,
    trusted_import_dirs,
    write_file_atomic,
)

SYSTEM_PYTHON = "/usr/bin/python3"
MARKER = "TUNEFLEET_PYTHON "
# Step 2, run with -I -S: the standard library only. Importing site under -S does not run it (site.main runs only
# without sys.flags.no_site): getsitepackages says where the site directories are, no .pth file is read.
SITE_PROBE = ("import json, site, sys; print('" + MARKER + "' + json.dumps({'version': sys.version.split()[0], "
              "'site': site.getsitepackages(), 'path': [p for p in sys.path if p]}))")
# Step 4, run with -I: site has run (its .pth files, sitecustomize) and nothing else.
PATH_PROBE = "import json, sys; print('" + MARKER + "' + json.dumps({'path': [p for p in sys.path if p]}))"
STEP_TIMEOUT_S = 60
SITE_NAMES = ("site-packages", "dist-packages")
PROBE_TIMEOUT_S = 180  # importing torch from a cold page cache on a network filesystem takes a while
# Runs in the candidate, isolated: the trusted extra directories first, then `import torch` for real (a torch
# whose CUDA libraries are missing fails here, as it would in the engine), then what the report needs.
PROBE = ("import json, sys; sys.path[1:1] = [d for d in sys.argv[1].split(':') if d]; out = {'version': "
         "sys.version.split()[0], 'executable': sys.executable}\n"
         "try:\n import torch; out['torch'] = str(getattr(torch, '__version__', 'unknown'))\n"
         "except BaseException as exc:\n out['error'] = (type(exc).__name__ + ': ' + str(exc))[:300]\n"
         "out['path'] = [p for p in sys.path if p]\n"
         "print('" + MARKER + "' + json.dumps(out))")


def login_python(runner=run_command) -> tuple:
    """(path of `python3` on root's login PATH or None, why not): root's login shell (from the password
    database, trust-checked) asked on the node, as root would find it after logging in."""
    try:
        shell = check_file_trusted(pwd.getpwuid(0).pw_shell or "/bin/sh")
    except (OSError, KeyError) as exc:
        return None, f"root's login shell cannot be used: {exc}"
    out = runner([shell, "-l", "-c", "command -v python3"], timeout_s=30, env=clean_env())
    found = [line.strip() for line in (out.stdout or "").splitlines() if line.strip().startswith("/")]
    if out.returncode != 0 or not found:
        return None, f"{shell} -l: no python3 on root's login PATH"
    return found[-1], ""


def venv_dir(python: str) -> Optional[str]:
    """The venv `python` belongs to (the directory holding pyvenv.cfg above its bin/), or None."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    return venv if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else None


def venv_problem(python: str) -> Optional[str]:
    """Why a venv's own directories could be changed by someone else (None: not a venv, or trusted)."""
    venv = venv_dir(python)
    if venv is None:
        return None
    try:
        check_dir_trusted(venv)
        read_trusted_file(os.path.join(venv, "pyvenv.cfg"))
        for site in venv_sites(venv):
            check_dir_trusted(site)
    except OSError as exc:
        return f"its venv {venv}: {exc.strerror or exc}"
    return None


def venv_includes_system(venv: str) -> bool:
    """pyvenv.cfg's include-system-site-packages (site.venv's own reading of it: true, case-insensitive)."""
    for line in read_trusted_file(os.path.join(venv, "pyvenv.cfg")).splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "include-system-site-packages":
            return value.strip().lower() == "true"
    return False


def venv_sites(venv: str) -> list:
    return sorted(glob.glob(os.path.join(venv, "lib*", "python*", "site-packages")))


class Walked:
    """The trees already held to the rule in this search (each walked once: a site-packages with PyTorch is
    about 20,000 entries); a directory inside a walked tree is covered by it, except under the entries its walk
    left out (a standard library's site-packages: a hyphenated name is no module, so nothing is imported from
    it unless it is a sys.path entry of its own, which is then walked)."""

    def __init__(self, trees: Sequence[str] = ()) -> None:
        self.trees: list = [(os.path.realpath(t), ()) for t in trees]

    def _covered(self, real: str) -> bool:
        def within(tree: str, skipped: tuple) -> bool:
            inside = real.startswith(tree.rstrip("/") + "/")
            return real == tree or (inside and real[len(tree.rstrip("/")) + 1:].split("/", 1)[0] not in skipped)
        return any(within(tree, skipped) for tree, skipped in self.trees)

    def check(self, directory: str, skip: Sequence[str] = ()) -> None:
        """Walk `directory` (verify.safe_io.check_tree_trusted) unless a walked tree holds it; absent: nothing.
        skip: its own entries of those names left out."""
        real = os.path.realpath(directory)
        if not os.path.isdir(real) or self._covered(real):
            return
        check_tree_trusted(directory, skip=skip)
        self.trees.append((real, tuple(skip)))


def stdlib_dirs(python: str) -> list:
    """The standard library beside the interpreter `python` resolves to (<prefix>/lib/python3.N): what even
    `-I -S` runs (encodings, io), checked before the interpreter runs at all."""
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    return sorted(d for d in glob.glob(os.path.join(prefix, "lib*", "python3*")) if os.path.isdir(d))


def pth_dirs(site: str) -> list:
    """The directories a site directory's .pth files add to sys.path, read here and never run (an `import` line
    runs code from the path, which is checked whole before it runs)."""
    found = []
    for name in sorted(os.listdir(site)) if os.path.isdir(site) else []:
        if not name.endswith(".pth") or name.startswith("."):
            continue
        try:
            text = read_trusted_file(os.path.join(site, name), 1 << 20)
        except OSError:
            continue  # refused by the walk of the site directory already, or gone
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                found.append(os.path.normpath(os.path.join(site, line)))
    return found


def _answer(stdout: str) -> Optional[dict]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                found = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def _step(python: str, flags: list, code: str, args: list, runner, timeout_s: float) -> tuple:
    """(answer dict or None, why not) of one probe of the candidate."""
    out = runner([python, *flags, "-c", code, *args], timeout_s=timeout_s, env=clean_env())
    answer = _answer(out.stdout or "")
    if isinstance(answer, dict):
        return answer, ""
    lines = (out.stderr or "").strip().splitlines() or [f"exit {out.returncode}"]
    return None, "timed out" if out.timed_out else lines[-1][:300]


def _paths(answer: dict, key: str = "path") -> list:
    value = answer.get(key)
    return [p for p in value if isinstance(p, str) and os.path.isabs(p)] if isinstance(value, list) else []


def try_candidate(python: str, extra: Sequence[str], runner=run_command, walked: Optional[Walked] = None) -> dict:
    """What happened with one candidate: {"python", "resolved", "outcome": "torch"|"no torch"|"refused"|"missing",
    "detail", and "torch"/"version" when it imported}. Probed in the module's five steps, each after the trees it
    runs from were walked (walked: the trees already checked in this search)."""
    walked = walked if walked is not None else Walked(extra)
    tried = {"python": python, "resolved": os.path.realpath(python)}
    if not os.path.isabs(python):
        return dict(tried, outcome="refused", detail="not an absolute path")
    if not os.path.exists(python):
        return dict(tried, outcome="missing", detail="no such file")
    step = "the interpreter"
    try:
        check_file_trusted(python)
        problem = venv_problem(python)
        if problem:
            return dict(tried, outcome="refused", detail=problem)
        step = "its standard library"
        for directory in stdlib_dirs(python):  # its site directories are walked where they are used (step 3)
            walked.check(directory, skip=SITE_NAMES)
        step = "its site directories (run without site)"
        found, why = _step(python, ["-I", "-S"], SITE_PROBE, [], runner, STEP_TIMEOUT_S)
        if found is None:
            return dict(tried, outcome="no torch", detail=f"the probe without site did not answer: {why}")
        venv = venv_dir(python)
        # Without `site`, a venv's sys.prefix is still the base's (site.venv sets it): the base's site directories
        # are the venv's only when its pyvenv.cfg includes them.
        sites = (_paths(found, "site") if venv is None or venv_includes_system(venv) else []) + \
            venv_sites(venv or "/nonexistent")
        for directory in _paths(found) + sites + [d for site in sites for d in pth_dirs(site)]:
            walked.check(directory)
        step = "its sys.path (run with site)"
        path, why = _step(python, ["-I"], PATH_PROBE, [], runner, STEP_TIMEOUT_S)
        if path is None:
            return dict(tried, outcome="no torch", detail=f"the probe with site did not answer: {why}")
        for directory in _paths(path):
            walked.check(directory)
        step = "the directories it imports torch from"
        answer, why = _step(python, ["-I"], PROBE, [":".join(extra)], runner, PROBE_TIMEOUT_S)
        if answer is None:
            return dict(tried, outcome="no torch", detail=f"the probe did not answer: {why}")
        for directory in _paths(answer):
            walked.check(directory)
    except OSError as exc:
        return dict(tried, outcome="refused", detail=f"{step}: {exc.strerror or exc}")
    if "torch" in answer:
        return dict(tried, outcome="torch", torch=answer["torch"], version=answer.get("version"),
                    detail=f"imports torch {answer['torch']}")
    return dict(tried, outcome="no torch", version=answer.get("version"), detail=answer.get("error", "no torch"))


def count_gpus(dev: str = "/dev") -> int:
    """NVIDIA GPUs by their device nodes (/dev/nvidia0..N), as the multi-node launcher counts them."""
    return len([n for n in os.listdir(dev) if n.startswith("nvidia") and n[len("nvidia"):].isdigit()]) \
        if os.path.isdir(dev) else 0


def find(wanted: str, extra: Sequence[str], runner=run_command, dev: str = "/dev",
         ansibles: Optional[str] = sys.executable, path: Optional[str] = os.environ.get("PATH")) -> dict:
    """The search's answer: {"used": the interpreter that imports torch or None, "fallback": the one the node
    run uses (used, else the first trusted candidate that ran), "tried": [...], "gpus": N, "how": "..."}.
    `ansibles`: the interpreter Ansible runs this search with on the node (this process's)."""
    tried: list = []
    if wanted:
        candidates, how = [wanted], "verify_node_python"
    else:
        login, why = login_python(runner)
        # The interpreter Ansible itself runs on the node (its discovered or configured python: with a
        # connection local, the controller's python3 on PATH) is the one an operator chose for the node too.
        ansibles = ansibles if ansibles and os.path.isabs(ansibles) else None
        # python3 on the PATH Ansible's tasks get on the node (connection local: the operator's own PATH, where a
        # venv holding torch comes first on many GPU nodes); trust-checked like every candidate before it runs.
        on_path = next((os.path.join(d, "python3") for d in (path or "").split(os.pathsep)
                        if os.path.isabs(d) and os.path.isfile(os.path.join(d, "python3"))
                        and os.access(os.path.join(d, "python3"), os.X_OK)), None)
        candidates = list(dict.fromkeys(c for c in (login, on_path, ansibles, SYSTEM_PYTHON) if c))
        how = ("python3 on root's login PATH, then on the task's PATH, then the interpreter Ansible runs on the "
               "node, then " + SYSTEM_PYTHON)
        if why:
            tried.append({"python": "python3", "resolved": "", "outcome": "missing", "detail": why})
    used = None
    walked = Walked(extra)  # the extra directories were walked by verify.isolated before this module ran
    for python in candidates:
        if any(t["python"] == python for t in tried):
            continue
        outcome = try_candidate(python, extra, runner, walked)
        tried.append(outcome)
        if outcome["outcome"] == "torch":
            used = python
            break
    # The stdlib-only node run still needs an interpreter when none imports torch: the first that passed the
    # checks and ran.
    fallback = used or next((t["python"] for t in tried if t["outcome"] == "no torch" and "version" in t), None)
    return {"used": used, "fallback": fallback, "how": how, "tried": tried, "gpus": count_gpus(dev)}


def tried_text(search: dict) -> str:
    """'/opt/venv/bin/python3 (refused: ...); /usr/bin/python3 (no torch: ...)' for a reason line."""
    return "; ".join(f"{t.get('python')} ({t.get('outcome')}: {t.get('detail')})" for t in search.get("tried") or [])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verify.fleet.node_python")
    parser.add_argument("--wanted", default="", help="verify_node_python: the one interpreter to use ('' = find it)")
    parser.add_argument("--extra", default="", help="verify_node_pythonpath, ':'-separated")
    parser.add_argument("--out", required=True, help="where the answer (JSON) is written")
    args = parser.parse_args(argv)
    try:  # walked whole by verify.isolated as this module started: here their list, each checked again
        extra = trusted_import_dirs(args.extra.split(":") if args.extra else [], packages=())
    except UnsafePathError as exc:
        print(f"verify_node_pythonpath: {exc.strerror or exc}", file=sys.stderr)
        return 2
    search = find(args.wanted, extra)
    text = json.dumps(search, indent=1, sort_keys=True)
    write_file_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
