"""Build step only (metadata lives in pyproject.toml): the wheel carries the files verify.desired
renders the desired state from, and the collection's kernel rules (verify.kernel_rules), under
verify/_data/, laid out as in the repository.

The repository keeps one copy of them where the roles use them (roles/*/defaults/main.yml,
templates/); verify.desired.project_root() finds them there in a checkout or an installed
collection, and under verify/_data/ in an installed wheel.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Globs relative to the repository root; MANIFEST.in lists the same ones for the sdist.
# plugins/module_utils/kernel_rules.py and pci_config.py: the rules verify.kernel_rules and verify.pci_config
# load (one home each, shared with the roles).
DATA = ("roles/*/defaults/main.yml", "templates/*.j2", "plugins/module_utils/kernel_rules.py",
        "plugins/module_utils/pci_config.py")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout itself
            return
        found = [path for pattern in DATA for path in sorted(HERE.glob(pattern))]
        if not any(path.name == "desired_state.json.j2" for path in found):
            raise SystemExit(f"setup.py: templates/desired_state.json.j2 not found under {HERE}")
        for source in found:
            target = Path(self.build_lib, "verify", "_data", source.relative_to(HERE))
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))


setup(cmdclass={"build_py": BuildPyWithData})
