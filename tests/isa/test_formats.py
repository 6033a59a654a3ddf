"""Round trips binary <-> JSON <-> table for every opcode, byte layout, and malformed input."""

import json
import struct

import numpy as np
import pytest

from raptor.errors import PimFormatError
from raptor.isa import pim_binary, pim_json
from raptor.isa.opcodes import FIELD_MAP, OPCODE_CLASS, Opcode
from raptor.isa.pimdir import PimProgram, read_pimdir, write_pimdir
from raptor.isa.table import INST_DTYPE, interleave, joined, make, opcode_counts


def one_of_each() -> np.ndarray:
    """One record per opcode with every slot its class uses set to a distinct value."""
    recs = []
    for op in Opcode:
        cls = OPCODE_CLASS[op]
        rec = make(op, 1)
        rec["rd"], rec["r1"] = 3, 5
        for k, slot in enumerate(FIELD_MAP[cls]):
            rec[slot] = 7 + 11 * k + int(op)
        recs.append(rec)
    return np.concatenate(recs)


def test_dtype_is_the_20_byte_record():
    assert INST_DTYPE.itemsize == 20
    rec = make(Opcode.MVMUL, 1, rd=1, r1=2, r2_or_imm=16, generic1=1, generic2=3)
    assert rec.tobytes() == struct.pack("<BBBBiiii", 9, 1, 2, 0, 16, 1, 3, 0)


def test_worked_example_bytes_match_pimsim_fixture():
    # The 52-byte core_0.pim of pimsim-nn.md §5: setbw 8/8, mvmul rd=0 rs1=0 mbiw=8 group 0.
    stream = np.concatenate(
        [make(Opcode.SETBW, 1, generic1=8, generic2=8), make(Opcode.MVMUL, 1, r2_or_imm=8)]
    )
    expected = bytes.fromhex(
        "50494d42"
        "01000000"
        "02000000"
        "08000000"
        "00000000"
        "08000000"
        "08000000"
        "00000000"
        "09000000"
        "08000000"
        "00000000"
        "00000000"
        "00000000"
    )
    assert pim_binary.encode(stream) == expected
    assert len(expected) == 52


def test_opcode_numbers_are_pimsim_binary_codes():
    assert Opcode.VSOFTMAX == 21 and Opcode.VMV == 22 and Opcode.SYNC == 32 and Opcode.LD == 25
    assert len(Opcode) == 33


def test_binary_round_trip_every_opcode():
    s = one_of_each()
    back = pim_binary.decode(pim_binary.encode(s))
    assert back.tobytes() == s.tobytes()


def test_json_round_trip_every_opcode():
    s = one_of_each()
    objs = pim_json.to_objects(s)
    objs = json.loads(json.dumps(objs))
    back = pim_json.from_objects(objs)
    # rd/rs1 are only carried for classes that have them; compare class fields and registers used
    for a, b, o in zip(s, back, objs):
        op = Opcode(int(a["opcode"]))
        for slot in FIELD_MAP[OPCODE_CLASS[op]]:
            assert a[slot] == b[slot], (op, slot)
        if "rd" in o:
            assert a["rd"] == b["rd"]
        if "rs1" in o:
            assert a["r1"] == b["r1"]


def test_json_keys_follow_pimsim_examples():
    s = np.concatenate(
        [
            make(Opcode.SLDI, 1, rd=0, r2_or_imm=64),
            make(Opcode.MVMUL, 1, rd=0, r1=1, r2_or_imm=8, generic2=3),
            make(Opcode.SEND, 1, r2_or_imm=2, generic3=16),
            make(Opcode.SYNC, 1, r2_or_imm=1),
            make(Opcode.WAIT, 1, generic2=1),
        ]
    )
    objs = pim_json.to_objects(s)
    assert objs[0] == {"op": "sldi", "rd": 0, "rs1": 0, "imm": 64}
    assert objs[1] == {"op": "mvmul", "rd": 0, "rs1": 1, "mbiw": 8, "relu": 0, "group": 3}
    assert (
        objs[2]["core"] == 2
        and objs[2]["size"] == 16
        and objs[2]["offset"] == {"offset_select": 0, "offset_value": 0}
    )
    assert objs[3] == {
        "op": "sync",
        "core": 1,
        "event_register": 0,
        "offset": {"offset_select": 0, "offset_value": 0},
    }
    assert objs[4] == {"op": "wait", "event_register": 0, "wait_value": 1}


def test_bad_magic_version_truncation_and_opcode():
    good = pim_binary.encode(make(Opcode.VVADD, 2, generic3=4))
    with pytest.raises(PimFormatError, match="invalid PIM binary magic"):
        pim_binary.decode(b"PIMX" + good[4:])
    with pytest.raises(PimFormatError, match="unsupported PIM binary version 2"):
        pim_binary.decode(good[:4] + struct.pack("<I", 2) + good[8:])
    with pytest.raises(PimFormatError, match="announces 2 records, file holds 1"):
        pim_binary.decode(good[:-5])
    with pytest.raises(PimFormatError, match="truncated PIM binary header"):
        pim_binary.decode(b"PIM")
    bad = bytearray(good)
    bad[12] = 40
    with pytest.raises(PimFormatError, match="unknown opcode 40 at record 0"):
        pim_binary.decode(bytes(bad))
    # trailing bytes after the announced records are ignored, as pimsim-nn does
    assert len(pim_binary.decode(good + b"junk")) == 2


def test_read_many_reads_each_file_into_one_array(tmp_path):
    """Several .pim files (one empty, one with trailing bytes) read into consecutive views of one
    array: the records `read` gives file by file, and `joined` returns them without a copy; a
    truncated or malformed file is refused as `read` refuses it."""
    streams = [one_of_each(), make(Opcode.VVADD, 0), make(Opcode.SLDI, 3, rd=2, r2_or_imm=-9)]
    paths = [tmp_path / f"core_{i}.pim" for i in range(3)]
    for path, s in zip(paths, streams):
        pim_binary.write(path, s)
    paths[2].write_bytes(paths[2].read_bytes() + b"junk")
    got = pim_binary.read_many(paths)
    for g, path, s in zip(got, paths, streams):
        assert g.tobytes() == pim_binary.read(path).tobytes() == s.tobytes()
    whole = joined(got)
    assert whole.base is got[0].base and whole.tobytes() == b"".join(s.tobytes() for s in streams)
    apart = joined([np.copy(g) for g in got])  # not views of one array: concatenated
    assert apart.tobytes() == whole.tobytes() and not np.shares_memory(apart, whole)
    paths[1].write_bytes(paths[0].read_bytes()[:-3])
    with pytest.raises(PimFormatError, match="core_1.pim: truncated PIM binary: header"):
        pim_binary.read_many(paths)
    bad = bytearray(paths[0].read_bytes())
    bad[12] = 40
    paths[1].write_bytes(bytes(bad))
    with pytest.raises(PimFormatError, match="core_1.pim: unknown opcode 40 at record 0"):
        pim_binary.read_many(paths)


def test_json_errors():
    with pytest.raises(PimFormatError, match="unknown opcode 'vfoo'"):
        pim_json.from_objects([{"op": "vfoo"}])
    with pytest.raises(PimFormatError, match="must be a JSON array"):
        pim_json.from_objects({"op": "nop"})
    with pytest.raises(PimFormatError, match="cannot carry"):
        pim_json.from_objects([{"op": "sadd", "rd": 1, "rs1": 2, "rs2": 3}])


def _program(n_cores=2):
    w = [np.arange(6, dtype=np.float32).reshape(2, 3)]
    cores = [
        np.concatenate(
            [make(Opcode.SETBW, 1, generic1=16, generic2=16), make(Opcode.MVMUL, 1, r2_or_imm=16)]
        ),
        make(Opcode.LLDI, 1, generic3=8),
    ][:n_cores]
    return PimProgram(
        cores=cores,
        array_group_map=[[1], []][:n_cores],
        weight_matrices=w,
        array_group_weights=[[0], []][:n_cores],
        memory=np.linspace(0, 1, 10, dtype=np.float32),
        meta={"compiler": "raptor", "mode": "latency", "pipeline": 1},
    )


@pytest.mark.parametrize("emit_json", [False, True])
def test_pimdir_round_trip(tmp_path, emit_json):
    prog = _program()
    out = write_pimdir(prog, tmp_path / "pim", emit_json=emit_json)
    names = sorted(p.name for p in out.iterdir())
    ext = "json" if emit_json else "pim"
    assert names == ["config.json", f"core_0.{ext}", f"core_1.{ext}", "memory.bin", "weights.bin"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["core_cnt"] == 2 and cfg["array_group_map"] == {"core0": [1], "core1": []}
    back = read_pimdir(out)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(prog.cores, back.cores))
    np.testing.assert_array_equal(back.weight_matrices[0], prog.weight_matrices[0])
    np.testing.assert_array_equal(back.memory, prog.memory)
    # rewriting replaces the old directory whole, leaving no temporary siblings
    write_pimdir(prog, tmp_path / "pim")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pim"]


def test_pimdir_pim_wins_over_json_and_errors(tmp_path):
    prog = _program()
    out = write_pimdir(prog, tmp_path / "pim")
    pim_json.write(out / "core_0.json", make(Opcode.NOP, 3))
    assert len(read_pimdir(out).cores[0]) == 2  # .pim preferred
    (out / "core_1.pim").unlink()
    with pytest.raises(PimFormatError, match="missing core_1.pim or core_1.json"):
        read_pimdir(out)
    write_pimdir(prog, out)
    (out / "core_0_weights.bin").write_bytes(b"x")
    with pytest.raises(PimFormatError, match="malformed per-core instruction filename"):
        read_pimdir(out)


def test_out_of_range_array_group_is_rejected(tmp_path):
    prog = _program()
    prog.cores[0]["generic2"][1] = 4
    with pytest.raises(PimFormatError, match="mvmul uses array group 4, core has 1 array groups"):
        write_pimdir(prog, tmp_path / "pim")


def test_interleave_and_counts():
    a = make(Opcode.SLDI, 3, r2_or_imm=np.arange(3))
    b = make(Opcode.VVADD, 3, generic3=4)
    s = interleave([a, b])
    assert list(s["opcode"]) == [1, 10, 1, 10, 1, 10]
    assert list(s["r2_or_imm"][::2]) == [0, 1, 2]
    assert opcode_counts(s) == {"sldi": 3, "vvadd": 3}


def test_inspect_summary_and_cli(tmp_path, capsys):
    from raptor.cli import main
    from raptor.isa.inspect import inspect_pimdir

    write_pimdir(_program(), tmp_path / "run" / "pim", emit_json=True)
    s = inspect_pimdir(tmp_path / "run")  # the parent of pim/ is accepted too
    assert s["core_cnt"] == 2 and s["instructions"] == 3
    assert s["by_opcode"] == {"setbw": 1, "mvmul": 1, "lldi": 1}
    assert s["array_groups"] == 1 and s["crossbars"] == 1
    assert main(["inspect", str(tmp_path / "run" / "pim")]) == 0
    out = capsys.readouterr().out
    assert "mvmul" in out and "instructions   3" in out
    assert main(["inspect", str(tmp_path)]) == 2
    assert "not a pim directory" in capsys.readouterr().err
