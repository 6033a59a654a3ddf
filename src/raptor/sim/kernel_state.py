"""Flat state of the compiled engine (raptor.sim.kernel): column numbers of the per-core and
global arrays, event kinds, blocked states, return codes and error codes. Plain ints, shared by
the compiled loop and its Python driver (raptor.sim.compiled)."""

from __future__ import annotations

from raptor.isa.opcodes import Opcode

# opcodes the loop branches on (from the ISA enum)
OP_SETBW = int(Opcode.SETBW)
OP_MVMUL = int(Opcode.MVMUL)
OP_SLDI = int(Opcode.SLDI)
OP_SADD = int(Opcode.SADD)
OP_SSUB = int(Opcode.SSUB)
OP_SMUL = int(Opcode.SMUL)
OP_SADDI = int(Opcode.SADDI)
OP_SMULI = int(Opcode.SMULI)
OP_VEC_LO = int(Opcode.VVADD)
OP_VEC_HI = int(Opcode.VRSL)
OP_VVADD = int(Opcode.VVADD)
OP_VVSUB = int(Opcode.VVSUB)
OP_VVMUL = int(Opcode.VVMUL)
OP_VVMAX = int(Opcode.VVMAX)
OP_VRELU = int(Opcode.VRELU)
OP_VMV = int(Opcode.VMV)
OP_VAVG = int(Opcode.VAVG)
OP_VVDMUL = int(Opcode.VVDMUL)
OP_VVSLL = int(Opcode.VVSLL)
OP_VVSRA = int(Opcode.VVSRA)
OP_VRSU = int(Opcode.VRSU)
OP_VRSL = int(Opcode.VRSL)
OP_LD = int(Opcode.LD)
OP_ST = int(Opcode.ST)
OP_LLDI = int(Opcode.LLDI)
OP_LMV = int(Opcode.LMV)
OP_SEND = int(Opcode.SEND)
OP_RECV = int(Opcode.RECV)
OP_WAIT = int(Opcode.WAIT)
OP_SYNC = int(Opcode.SYNC)

# per-core ints (ci[core, ...])
CI_PC, CI_RND, CI_IBIW, CI_OBIW, CI_BLOCKED, CI_DONE, CI_N, CI_BASE = range(8)
CI_LROW, CI_GBASE, CI_GN, CI_FIRST_SETBW, CI_ALT_BASE, CI_FRESH = range(8, 14)
# pending blocking instruction: memory (is_st, host, local, elems, bytes, link, cost key),
# send/recv (other core, local, elems, bytes, link, cost key), wait (event register, value)
CI_PA, CI_PB, CI_PC2, CI_PD, CI_PE, CI_PF, CI_PG = range(14, 21)
# timing pass: where the core's rendezvous go in the send / recv logs, and how many it has had
CI_SBASE, CI_RBASE, CI_NSENT, CI_NRECV = range(21, 25)
# the local memory the core's instructions were checked for, as two marks around its middle:
# every checked range's part below the middle ends at most at CI_LLO, its part above starts at
# CI_LHI or later (codegen allocates from both ends); no value is ever written outside
# [0, CI_LLO) and [CI_LHI, size) (raptor.sim.compiled re-zeroes them to reuse the memory)
CI_LLO, CI_LHI = 25, 26
N_CI = 27

# per-core floats (cf[core, ...]): fetch/end times, pending start, stats, segment accumulators
CF_TF, CF_TE, CF_PS = range(3)
CF_MB, CF_VB, CF_TB, CF_SS, CF_SR, CF_SM = range(3, 9)
CF_AM, CF_AV, CF_AT, CF_EM, CF_EV, CF_EL = range(9, 15)
N_CF = 15

# global floats (gf[...])
G_NOW, G_EM, G_EV, G_EL, G_GBUSY, G_GE, G_GNS, G_NE, G_ICE, G_EW = range(10)  # G_EW: bin width
N_GF = 10
# global ints (gi[...])
I_SEQ, I_HN, I_QH, I_QT, I_GREQ, I_GBYTES, I_FLITS, I_ICB, I_NOCB = range(9)
I_CORE, I_X1, I_X2, I_X3, I_X4, I_X5, I_X6 = range(9, 16)  # error / host-op details
I_NMEM, I_NRDV = range(16, 18)  # timing pass: host accesses and rendezvous logged so far
N_GI = 18

# positions in the state tuple `kernel.run` takes (built by raptor.sim.compiled); S_HOST is
# itself a tuple (host data, written mask, input regions, input values, output regions, outputs);
# S_EH: the energy-vs-time bins (raptor.sim.energy.EnergyTimeline)
(S_INS, S_AKEY, S_CI, S_CF, S_REGS, S_EVR, S_FIN, S_LOCAL, S_GW, S_WFLAT, S_WMETA, S_CTAB, S_NET,
 S_SWFREE, S_GF, S_GI, S_HT, S_HI, S_Q, S_RWAIT, S_PEND_TO, S_HOST, S_SCRATCH, S_EH,
 S_LOG) = range(25)  # fmt: skip
# S_LOG: the timing pass's record for the value pass (raptor.sim.kernel_values_pass), a tuple
# (host-access log: the core of each ld/st in the order they reached host memory; send log and
# recv log: each core's rendezvous numbers in its program order, from CI_SBASE / CI_RBASE;
# receiver of each rendezvous)
# prm (the loop's scalar parameters): clock period, element bytes, local memory elements,
# rounds, NoC bus width, cores, and whether the loop computes values (0: timing pass only)
P_VALUES = 6

# event kinds (as the Python engine's)
EV_MEM, EV_WAIT, EV_SYNC, EV_READY, EV_RECV, EV_RDV = range(6)
# blocked states
B_NONE, B_WAIT_DISPATCH, B_WAIT, B_MEMORY, B_SEND, B_RECV = range(6)
# stall kinds of a resume
K_SYNC, K_RECV, K_MEMORY = range(3)

# kernel return codes
RC_DONE, RC_HOSTOP, RC_ERROR, RC_DEADLOCK = range(4)

# value pass (raptor.sim.kernel_values_pass): per-core ints (vi[core, ...]) and global ints
V_PC, V_RND, V_BLOCKED, V_NSENT, V_NRECV = range(5)
N_V = 5
VB_NONE, VB_RECV, VB_HOST, VB_DONE = range(4)
# vg: next host access, the core running (-1: none), ready-stack size, arena top, payloads in
# the arena, entries of the arena's list, and a host op's details (opcode, d, a, b, length)
VG_MPTR, VG_CUR, VG_NREADY, VG_TOP, VG_LIVE, VG_NLIST = range(6)
VG_OP, VG_D, VG_A, VG_B, VG_N = range(6, 11)
N_VG = 11
RC_GROW = 4  # value pass: the arena is full of payloads not yet received (the driver grows it)
# error codes (messages in raptor.sim.compiled)
(
    E_MVM_WIDTH,
    E_MVM_WEIGHT,
    E_MVM_MBIW,
    E_MVM_RANGE,
    E_VEC_LEN,
    E_VEC_UNSUPPORTED,
    E_LOCAL_RANGE,
    E_SYNC_TARGET,
    E_CHECK_LOCAL,
    E_CHECK_HOST,
    E_SEND_TARGET,
    E_RECV_TARGET,
    E_RECV_NO_PROGRAM,
    E_SIZE_MISMATCH,
    E_INTERNAL,
) = range(15)
