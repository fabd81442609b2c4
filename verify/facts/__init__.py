"""What the node is, read through the Node: GPU inventory and health readings, PCI addresses, links
(NVLink, PCIe, HCA ports), tool and library versions, firmware, the kernel log's driver records.

Readers only: nothing here judges. Checks and benchmarks (one layer up) judge what these return.
"""
