"""ansible-playbook with every VariableManager.get_vars call counted: one byte appended to the file named
first on the command line, in the controller and in each forked worker alike. hostvars[host] costs one
call, so the count shows whether a task walks every other host's variables (tests/unit/test_path_mtu_peers.py).

    python tests/helpers/ansible_playbook_counted.py COUNT_FILE [ansible-playbook arguments]
"""
from __future__ import annotations

import os
import sys

from ansible.cli.playbook import main
from ansible.vars import manager

_get_vars = manager.VariableManager.get_vars


def main_counted() -> None:
    count_fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)

    def counted(self, *args, **kwargs):
        os.write(count_fd, b".")
        return _get_vars(self, *args, **kwargs)

    manager.VariableManager.get_vars = counted
    sys.argv = ["ansible-playbook", *sys.argv[2:]]
    main()


if __name__ == "__main__":
    main_counted()
