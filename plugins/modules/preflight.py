#!/usr/bin/python
"""tunefleet.gpu_node.preflight: refuse inputs this host cannot take, before any change."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: Validate every tunefleet role variable against this host before anything changes
description:
  - Checks that sysctl keys exist and are writable and their values are strings or integers (YAML
    booleans refused), that a requested TCP congestion control is available, that requested huge page
    sizes and NUMA nodes exist, that named interfaces exist and their maximum MTU allows O(variables)
    C(network_mtu) (68..65535), that matched block devices offer C(storage_scheduler), that the CPU
    governor and THP modes are offered, that limits fit C(fs.nr_open), and, when
    C(preflight_require_gpu_driver) is true, that an NVIDIA driver is loaded.
  - Refuses a storage device named without a glob that is not on the host, and a glob in
    C(storage_device_patterns) that matches no device unless C(storage_allow_no_match) is true;
    sysctl values the kernel would refuse for the keys the roles set (the running kernel asked in a
    throwaway network namespace where it can be, as root, a model per kernel version where not; the
    floor of C(net.ipv4.ip_local_port_range), C(net.ipv4.ip_unprivileged_port_start)); and,
    given O(known_names), every name in O(defined_names) with a role prefix that no argument spec
    knows, with the closest known name.
  - Reads only; never changes the host. Fails with one message per problem, each naming the host,
    the variable and the value.
  - When nothing is refused, returns what the roles of O(roles) plan with as the host fact
    C(tunefleet_node), read once here instead of by a module call in each role (issue 13) - the
    matching block devices, one C(scaling_governor) path per cpufreq policy, whether the kernel has
    transparent huge pages, C(fs.nr_open), and the NVIDIA driver, nvidia-persistenced, nvidia_peermem,
    openibd and the GPUs whose persistence mode is Disabled.
version_added: "0.1.0"
options:
  host:
    description: Inventory name of the host, used in messages.
    type: str
    required: true
  variables:
    description: Role variables by name (C(sysctl_settings), C(network_mtu), ...). A variable left out is not checked.
    type: dict
    required: true
  roles:
    description: Roles that will run on this host; only their variables are judged.
    type: list
    elements: str
    default: [sysctl, network, storage, gpu, memory, limits, cpu]
  root:
    description: Tree holding C(/proc), C(/sys) and C(/lib/modules); only tests change it.
    type: path
    default: /
  defined_names:
    description: Names of every variable defined for this host (the role passes C(query('varnames', ...))).
    type: list
    elements: str
    default: []
  known_names:
    description: Every option of every role's C(meta/argument_specs.yml); empty skips the name check.
    type: list
    elements: str
    default: []
author: tunefleet developers
"""

EXAMPLES = r"""
- name: Refuse inputs this host cannot take
  tunefleet.gpu_node.preflight:
    host: "{{ inventory_hostname }}"
    variables:
      network_mtu: "{{ network_mtu }}"
      network_interfaces: "{{ network_interfaces }}"
"""

RETURN = r"""
ansible_facts:
  description: C(tunefleet_node), the reads of the enabled roles of O(roles) (only when nothing is refused).
  returned: success
  type: dict
  sample: {"tunefleet_node": {"thp": true, "nr_open": 1048576, "cpu_governor_paths": []}}
problems:
  description: One line per refused input (empty when the host can take everything).
  returned: always
  type: list
  elements: str
  sample: ["host gpu01: network_mtu = 99999: outside 68..65535"]
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.module_guard import failing_cleanly  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.node_reads import read_node  # noqa: E402
from ansible_collections.tunefleet.gpu_node.plugins.module_utils.preflight_checks import (  # noqa: E402
    preflight,
    role_enabled,
)


def make_ip_details(module: AnsibleModule):
    ip = module.get_bin_path("ip")

    def ip_details(interface: str):
        if ip is None:
            return None  # hosts without iproute2 (seen on GPU cloud images): MTU range still checked
        rc, out, _ = module.run_command([ip, "-d", "-j", "link", "show", "dev", interface])
        if rc != 0:
            rc, out, _ = module.run_command([ip, "-d", "link", "show", "dev", interface])
        return out if rc == 0 else None

    return ip_details


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type="str", required=True),
            variables=dict(type="dict", required=True),
            roles=dict(type="list", elements="str",
                       default=["sysctl", "network", "storage", "gpu", "memory", "limits", "cpu"]),
            root=dict(type="path", default="/"),
            defined_names=dict(type="list", elements="str", default=[]),
            known_names=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    with failing_cleanly(module, "tunefleet.gpu_node.preflight"):
        p = module.params
        found = preflight(p["root"], p["variables"], p["roles"], make_ip_details(module),
                          p["defined_names"], p["known_names"])
        problems = [x.message(p["host"]) for x in found]
        if problems:
            module.fail_json(msg="preflight refused this host, nothing was changed:\n" + "\n".join(problems),
                             problems=problems)
        enabled = [role for role in p["roles"] if role_enabled(p["variables"], role)]

        def which(name: str):
            return module.get_bin_path(name, opt_dirs=["/usr/bin", "/usr/local/bin", "/usr/sbin", "/sbin"])

        def module_known(name: str) -> bool:
            modinfo = module.get_bin_path("modinfo", opt_dirs=["/usr/sbin", "/sbin"])
            return bool(modinfo) and module.run_command([modinfo, "-n", name])[0] == 0

        node = read_node(p["root"], p["variables"], enabled, which, module_known, module.run_command)
        module.exit_json(changed=False, problems=[], ansible_facts={"tunefleet_node": node})


if __name__ == "__main__":
    main()
