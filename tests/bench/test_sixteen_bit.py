"""bench.sixteen_bit: every format of a row runs, and symdiff's 16-bit results are
within their once-rounding of JAX float64 (relative L2 at most half the format's
relative spacing, 2^-12 for float16 and 2^-9 for bfloat16, with room for float32's)."""
from bench import sixteen_bit


def test_a_row_in_every_format(capsys):
    results = sixteen_bit.main(["--device", "cpu", "--scale", "65536", "--budget", "0.01",
                                "--workload", "elementwise_chain"])
    (row,) = results["rows"]
    cells = row["formats"]
    assert set(cells) == {"float32", "float16", "bfloat16"}
    assert all(c["symdiff_ms"] > 0 and c["jax_ms"] > 0 for c in cells.values()), cells
    assert cells["float16"]["floor_bytes"] * 2 == cells["float32"]["floor_bytes"]
    assert cells["float32"]["symdiff_error"] < 1e-5
    assert cells["float16"]["symdiff_error"] <= 2.0 ** -11 and cells["bfloat16"]["symdiff_error"] <= 2.0 ** -8
    assert "bfloat16" in capsys.readouterr().out
