"""The PCI config-space rules (extended capability walk, ACS registers and bits, hypervisor DMI names) for
verify. Their one home is the collection's plugins/module_utils/pci_config.py, which the pcie role's module
imports and its boot unit runs; verify loads the same file the way verify.kernel_rules does."""
from __future__ import annotations

from verify.kernel_rules import load_home

_home = load_home("pci_config.py")
ACS_BITS = _home.ACS_BITS
ACS_CAP_ID = _home.ACS_CAP_ID
CLEARED_BITS = _home.CLEARED_BITS
CONFIG_MAX = _home.CONFIG_MAX
EXT_CAP_START = _home.EXT_CAP_START
HYPERVISOR_DMI = _home.HYPERVISOR_DMI
PciConfigError = _home.PciConfigError
bits_text = _home.bits_text
find_ext_capability = _home.find_ext_capability
