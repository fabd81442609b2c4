"""NVIDIA's Xid catalog (Ampere and newer), one entry per Xid code, with the action class a fleet
operator takes.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (the "Xids" table, with the
spreadsheet https://docs.nvidia.com/Xid-Catalog.xlsx, and its "Fault Resolution Buckets" / "Guidance
Classes" table for what each bucket means). The page carries no version or date; the copy read here
lists codes 1..172, the newest rows being 162-172 (power smoothing, confidential computing, PCIe fatal
timeout, WPR, SEC2 halt, DRAM/SRAM detail for Xid 48) with "CUDA 12.9; GPU driver R575" the newest
linkage noted on any row. It matches, code for code and bucket for bucket, leptonai/gpud's
components/accelerator/nvidia/xid/catalog_generated.go, generated from that spreadsheet on 2025-10-29
(read here as a cross-check only). Read for this module on 2026-11-25 from a stored copy of the page.

`name` is the catalog's "Description" column, verbatim ("Unused": the code is deprecated or applied
to V100 and earlier only); `catalog_action` is its "Resolution Bucket (Immediate Action)" column,
verbatim ("" where the catalog gives none); MNEMONICS holds its "Mnemonic" column.

Action classes (defined in verify.judging.verdicts with their status; least to most disruptive):
  OK          nothing: informational or test events.
  WATCH       no action now; count it and look when it repeats.
  APPLICATION the application must be restarted (or fixed); the GPU stays in service.
  RESET_GPU   drain the GPU's jobs and reset it (nvidia-smi -r).
  REBOOT      drain the node and reboot it.
  DRAIN_RMA   drain the node; hardware service / RMA (or, for a code the catalog calls Unused, support
              must look: it should never be logged on Ampere and newer).

Mapping from the catalog's immediate-action bucket:
  RESTART_APP -> APPLICATION ("the application should be restarted; RESET_GPU or RESTART_BM is not
      deemed necessary"); also application-caused codes whose bucket is IGNORE or a workflow:
      43 (trigger text: a user application fault, the GPU stays healthy), 45 (WORKFLOW_XID_45: solo,
      RESTART_FM; not solo, follow the other Xid; logged when an application is torn down),
      137 (XID_137_FLOW: typically application bugs).
  RESET_GPU -> RESET_GPU.
  RESTART_BM ("restart bare metal") and RESTART_VM -> REBOOT.
  CONTACT_SUPPORT and CHECK_MECHANICALS ("check device seating and connections") -> DRAIN_RMA.
  IGNORE -> WATCH, or OK for 14 (fake / injected error), 106 and 107 (SMBPBI test messages) and 108
      (Unused); IGNORE codes still counted: 37, 38, 44, 66, 67, 92, 93, 121, 141, 152, 153, 157, 160, 161.
  UPDATE_SWFW (78, vGPU start error) -> WATCH.
  Workflows, by the first action each implies:
      WORKFLOW_XID_48 (48): "Solo: RESET_GPU; w/ 63 or 64: DRAIN_AND_RESET" -> RESET_GPU.
      WORKFLOW_NVLINK_ERR (74): decode the registers; the trigger text says a GPU reset or node reboot
          is needed to clear it -> RESET_GPU.
      WORKFLOW_NVLINK5_ERR (144-150): the class depends on the message's IntrInfo / error status (the
          catalog's "XID 144-150 Decode" sheet, not decoded here). 144, 145, 146, 149, 150 -> RESET_GPU,
          the worst immediate action among their decode rows (most rows are IGNORE: a node whose Xid 154
          says "None" can be left running); 147, 148 -> WATCH, every decode row being IGNORE.
      CHECK_UVM (159): "If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE" -> RESET_GPU (UVM is
          loaded on every Linux CUDA host).
      XID_154 (154): "follow Xid 154 reported guidance": the line names the action; WATCH here, and
          recovery_action() reads the line.
  Overrides of the bucket, from NVIDIA's own guidance elsewhere:
      63 (IGNORE) -> RESET_GPU: "row-remapping requires a GPU reset to take effect" (NVIDIA GPU Memory
          Error Management, https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html;
          the Xid 63 line itself ends "reset gpu to activate"): reset when the GPU is idle.
      64 (RESET_GPU) -> DRAIN_RMA: a row-remapping failure is an RMA condition (same manual, "RMA Policy
          Thresholds for Row-Remapping").
      94 (RESTART_APP) -> RESET_GPU: the catalog's trigger text for 94: "It is recommended to reset the
          GPU when convenient".

Inferred, not read (the catalog has no immediate bucket for 162-172); each from the row's trigger text
where there is one: 162 OK, 163 WATCH, 164 WATCH, 165 WATCH, 166 WATCH, 170 WATCH (confidential
computing only), 167 REBOOT (no text at all: treated like Xid 79, the other PCIe-loss code), 168 REBOOT
("either ECC should be enabled or boot re-attempted with shifted WPR"), 169 RESET_GPU (same
description as 62, PMU_HALT_ERROR, which is RESET_GPU), 171 and 172 RESET_GPU (detail lines for Xid 48).
INFERRED lists them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

# The action classes have one home (what each means, the status it gets): verify.judging.verdicts.
from verify.judging.verdicts import ACTIONS, APPLICATION, DRAIN_RMA, OK, REBOOT, RESET_GPU, WATCH

__all__ = ["ACTIONS", "CATALOG", "INFERRED", "MNEMONICS", "OVERRIDDEN", "XidEntry", "lookup", "recovery_action",
           "APPLICATION", "DRAIN_RMA", "OK", "REBOOT", "RESET_GPU", "WATCH"]


@dataclass(frozen=True)
class XidEntry:
    code: int
    name: str  # the catalog's Description
    action: str  # our class, one of ACTIONS
    catalog_action: str  # the catalog's Resolution Bucket (Immediate Action); "" where it gives none


MNEMONICS: dict[int, str] = {}


def _e(code: int, mnemonic: str, name: str, catalog_action: str, action: str) -> XidEntry:
    MNEMONICS[code] = mnemonic
    return XidEntry(code, name, action, catalog_action)


_ENTRIES = (
    _e(1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", APPLICATION),
    _e(9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP", APPLICATION),
    _e(12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(13, "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
       "Graphics Engine Exception",
       "RESTART_APP", APPLICATION),
    # IGNORE: fake or injected error from userspace (trigger conditions)
    _e(14, "ROBUST_CHANNEL_FAKE_ERROR", "Unused", "IGNORE", OK),
    _e(15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(17, "ROBUST_CHANNEL_PARAMETER_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP", APPLICATION),
    _e(26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(27, "ROBUST_CHANNEL_VP_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(28, "ROBUST_CHANNEL_VP2_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(29, "ROBUST_CHANNEL_BSP_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", APPLICATION),
    _e(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP", APPLICATION),
    _e(33, "ROBUST_CHANNEL_SEC_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(34, "ROBUST_CHANNEL_MSVLD_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(36, "ROBUST_CHANNEL_MSPPP_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE", WATCH),
    _e(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE", WATCH),
    _e(39, "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP", APPLICATION),
    _e(40, "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP", APPLICATION),
    _e(41, "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP", APPLICATION),
    _e(42, "ROBUST_CHANNEL_VIC_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    # IGNORE, but the trigger conditions say a user application fault; the GPU stays healthy
    _e(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE", APPLICATION),
    _e(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE", WATCH),
    # WORKFLOW_XID_45: solo -> RESTART_FM, not solo -> follow the other Xid; trigger: app aborted / torn down
    _e(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
       "Preemptive cleanup, due to previous errors – Most likely to see when "
       "running multiple cuda applications and hitting a DBE",
       "WORKFLOW_XID_45", APPLICATION),
    _e(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", RESET_GPU),
    _e(47, "ROBUST_CHANNEL_NVENC0_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    # WORKFLOW_XID_48: solo -> RESET_GPU; with 63/64 -> drain and reset
    _e(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", RESET_GPU),
    _e(49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(51, "SILENT_RUNNING_STRESS_TEST_FAILURE", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
       "Auxiliary power is not connected to the GPU board",
       "CHECK_MECHANICALS", DRAIN_RMA),
    _e(55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(56, "DISPLAY_CHANNEL_EXCEPTION", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(57, "FB_LINK_TRAINING_FAILURE_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(58, "FB_MEMORY_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(59, "PMU_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP", APPLICATION),
    _e(61, "PMU_BREAKPOINT", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(62, "PMU_HALT_ERROR", "Internal micro-controller halt (newer drivers)", "RESET_GPU", RESET_GPU),
    # override of IGNORE: the new remapping takes effect at the next GPU reset (NVIDIA GPU memory error management,
    # row remapping); reset when idle
    _e(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", RESET_GPU),
    # override of RESET_GPU: a row-remapping failure meets NVIDIA's RMA policy (GPU memory error management, RMA
    # policy thresholds)
    _e(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", DRAIN_RMA),
    _e(65, "ROBUST_CHANNEL_NVENC1_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE", WATCH),
    _e(67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE", WATCH),
    _e(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP", APPLICATION),
    _e(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", APPLICATION),
    _e(70, "ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", "RESTART_APP", APPLICATION),
    _e(71, "ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", "RESTART_APP", APPLICATION),
    _e(72, "ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", "RESTART_APP", APPLICATION),
    _e(73, "ROBUST_CHANNEL_NVENC2_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    # WORKFLOW_NVLINK_ERR: trigger text: a GPU reset or node reboot clears it
    _e(74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", RESET_GPU),
    _e(75, "ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", "RESTART_APP", APPLICATION),
    _e(76, "ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", "RESTART_APP", APPLICATION),
    _e(77, "ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", "RESTART_APP", APPLICATION),
    # UPDATE_SWFW: vGPU start error
    _e(78, "VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW", WATCH),
    _e(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", REBOOT),
    _e(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP", APPLICATION),
    _e(81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP", APPLICATION),
    _e(83, "ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", "RESTART_APP", APPLICATION),
    _e(84, "ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", "RESTART_APP", APPLICATION),
    _e(85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP", APPLICATION),
    _e(86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP", APPLICATION),
    _e(87, "NVTELEMETRY_DRIVER_REPORT", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(88, "ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", "RESTART_APP", APPLICATION),
    _e(89, "ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", "RESTART_APP", APPLICATION),
    _e(90, "LTC_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(91, "RESERVED_XID", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    # The catalog's bucket is IGNORE: watch. (tunefleet's first Xid table said drain-rma; the catalog is the
    # source, and the single-bit errors it counts are corrected: a failing row shows up as Xid 63/64.)
    _e(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", WATCH),
    _e(93, "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE", WATCH),
    # override of RESTART_APP: the trigger conditions recommend resetting the GPU when convenient (contained ECC
    # error)
    _e(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP", RESET_GPU),
    _e(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", RESET_GPU),
    _e(96, "ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", "RESTART_APP", APPLICATION),
    _e(97, "ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", "RESTART_APP", APPLICATION),
    _e(98, "ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", "RESTART_APP", APPLICATION),
    _e(99, "ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", "RESTART_APP", APPLICATION),
    _e(100, "ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", "RESTART_APP", APPLICATION),
    _e(101, "ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", "RESTART_APP", APPLICATION),
    _e(102, "ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", "RESTART_APP", APPLICATION),
    _e(103, "ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", "RESTART_APP", APPLICATION),
    _e(104, "ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", "RESTART_APP", APPLICATION),
    _e(105, "ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", "RESTART_APP", APPLICATION),
    # IGNORE: SMBPBI test message
    _e(106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE", OK),
    # IGNORE: SMBPBI test message
    _e(107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE", OK),
    # IGNORE, Unused
    _e(108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused", "IGNORE", OK),
    _e(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", RESET_GPU),
    _e(110, "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU", RESET_GPU),
    _e(111, "BUNDLE_ERROR_EVENT", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(112, "DISP_SUPERVISOR_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(113, "DP_LT_FAILURE", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(114, "HEAD_RG_UNDERFLOW", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(115, "CORE_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(116, "WINDOW_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(117, "CURSOR_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(118, "HEAD_REGS", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", RESET_GPU),
    _e(120, "GSP_ERROR", "GSP Error", "RESET_GPU", RESET_GPU),
    _e(121, "C2C_ERROR", "C2C Error", "IGNORE", WATCH),
    _e(122, "SPI_PMU_RPC_READ_FAIL", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(123, "SPI_PMU_RPC_WRITE_FAIL", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(124, "SPI_PMU_RPC_ERASE_FAIL", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(125, "INFOROM_FS_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(126, "ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", "RESTART_APP", APPLICATION),
    _e(127, "ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", "RESTART_APP", APPLICATION),
    _e(128, "ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", "RESTART_APP", APPLICATION),
    _e(129, "ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", "RESTART_APP", APPLICATION),
    _e(130, "ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", "RESTART_APP", APPLICATION),
    _e(131, "ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", "RESTART_APP", APPLICATION),
    _e(132, "ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", "RESTART_APP", APPLICATION),
    _e(133, "ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", "RESTART_APP", APPLICATION),
    _e(134, "ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", "RESTART_APP", APPLICATION),
    _e(135, "ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", "RESTART_APP", APPLICATION),
    _e(136, "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU", RESET_GPU),
    # IGNORE; investigatory XID_137_FLOW: typically application-level bugs (illegal NVLink P2P access)
    _e(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE", APPLICATION),
    _e(138, "ROBUST_CHANNEL_DLA_ERROR", "Unused", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP", APPLICATION),
    _e(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", RESET_GPU),
    _e(141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE", WATCH),
    _e(142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", "CONTACT_SUPPORT", DRAIN_RMA),
    _e(143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", RESET_GPU),
    # WORKFLOW_NVLINK5_ERR: worst action of its 144-150 decode rows is RESET_GPU
    _e(144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR", RESET_GPU),
    # WORKFLOW_NVLINK5_ERR: worst action of its 144-150 decode rows is RESET_GPU
    _e(145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR", RESET_GPU),
    # WORKFLOW_NVLINK5_ERR: worst action of its 144-150 decode rows is RESET_GPU
    _e(146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR", RESET_GPU),
    # WORKFLOW_NVLINK5_ERR; every row of the catalog's 144-150 decode for 147 is IGNORE
    _e(147, "NVLINK_TREX_ERROR", "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR", WATCH),
    # WORKFLOW_NVLINK5_ERR; every row of the catalog's 144-150 decode for 148 is IGNORE
    _e(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR", WATCH),
    # WORKFLOW_NVLINK5_ERR: worst action of its 144-150 decode rows is RESET_GPU
    _e(149, "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR", RESET_GPU),
    # WORKFLOW_NVLINK5_ERR: worst action of its 144-150 decode rows is RESET_GPU
    _e(150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR", RESET_GPU),
    # RESTART_VM
    _e(151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM", REBOOT),
    _e(152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", "IGNORE", WATCH),
    _e(153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", "IGNORE", WATCH),
    # XID_154: the message itself names the action; see recovery_action()
    _e(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154", WATCH),
    _e(155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU", RESET_GPU),
    _e(156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU", RESET_GPU),
    _e(157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE", WATCH),
    _e(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", RESET_GPU),
    # CHECK_UVM: RESET_GPU where UVM is in use (every CUDA Linux host), else IGNORE
    _e(159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", "CHECK_UVM", RESET_GPU),
    _e(160, "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE", WATCH),
    _e(161, "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE", WATCH),
    # INFERRED (no bucket in the catalog): power smoothing capability back on
    _e(162, "PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", "", OK),
    # INFERRED (no bucket): trigger text says no GPU reset required; fix thermals or reload driver / reset if disabled
    # by timeout
    _e(163, "PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", "", WATCH),
    # INFERRED (no bucket): power smoothing low lifetime; monitor, expect replacement if power smoothing is wanted
    _e(164, "PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", "", WATCH),
    # INFERRED (no bucket): power smoothing lifetime exhausted; replace only if power swings are not acceptable
    _e(165, "PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", "", WATCH),
    # INFERRED (no bucket): confidential-computing mode only
    _e(166, "NVLINK_SECURE_CRYPTO_ERR",
       "CC traffic seen prior to link properly being configured for encrypted traffic",
       "", WATCH),
    # INFERRED (no bucket, no trigger text): PCIe fatal timeout, treated like Xid 79 (RESTART_BM)
    _e(167, "PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", "", REBOOT),
    # INFERRED (no bucket): enable ECC or re-attempt the boot with a shifted WPR (trigger text)
    _e(168, "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR (write protected region)", "", REBOOT),
    # INFERRED (no bucket): same wording as Xid 62 PMU_HALT_ERROR, which is RESET_GPU
    _e(169, "SEC2_HALT_ERROR", "Internal micro-controller halt", "", RESET_GPU),
    # INFERRED (no bucket): confidential-computing mode only
    _e(170, "NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", "", WATCH),
    # INFERRED (no bucket): detail line for Xid 48 (DRAM), follows WORKFLOW_XID_48
    _e(171, "UNCORRECTABLE_DRAM_ERROR",
       "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM",
       "", RESET_GPU),
    # INFERRED (no bucket): detail line for Xid 48 (SRAM), follows WORKFLOW_XID_48
    _e(172, "UNCORRECTABLE_SRAM_ERROR",
       "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM",
       "", RESET_GPU),
)
CATALOG: dict[int, XidEntry] = {entry.code: entry for entry in _ENTRIES}
# codes whose class was inferred (no bucket in the catalog) rather than read
INFERRED = frozenset(range(162, 173))
# codes whose class departs from the plain bucket mapping (see the module docstring for why)
OVERRIDDEN = frozenset({14, 43, 63, 64, 94, 106, 107, 108, 137, 147, 148})


def lookup(code: int) -> Optional[XidEntry]:
    """The catalog's entry for an Xid code, or None for a code the catalog does not list."""
    return CATALOG.get(code)


# Xid 154's text: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"; the catalog
# lists the values None, Drain P2P, Drain and Reset, GPU Reset Required, Node Reboot Required.
_RECOVERY = {
    "none": OK,
    "drain p2p": WATCH,  # stop the GPU's peer-to-peer processes, then read the recovery action again
    "drain and reset": RESET_GPU,
    "gpu reset required": RESET_GPU,
    "node reboot required": REBOOT,
}
_RECOVERY_TO = re.compile(r"\bto\s+0x[0-9a-fA-F]+\s*\(([^)]*)\)")


def recovery_action(line: str) -> Optional[str]:
    """The class named by an Xid 154 line's new recovery action, or None when the line names none we know."""
    match = _RECOVERY_TO.search(line)
    return _RECOVERY.get(" ".join(match.group(1).lower().split())) if match else None
