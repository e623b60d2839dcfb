#!/usr/bin/env python3
"""Tests of kernel_kinds.py: real kernel names of both trainers (ours from profile_step's
traces, the peer's from torch.compile's) sorted into their kinds, the per-step sums of two
small traces worked out by hand, the side-by-side difference, FILE:STEPS, and the exit codes for
bad usage and a file that is not a trace."""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_kinds  # noqa: E402

NAMES = {
    # ours
    "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT": "GEMM",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1": "GEMM",
    "void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float>(int, int)": "GEMM",
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x64x64": "attention",
    "void cudnn::fusion::compute_dot_do_o_specialized<true>(int, int)": "attention",
    "void cudnn::fusion::convert_dq_to_16bits(int)": "attention",
    "void mt::kernels::(anonymous namespace)::StagedBackwardKernel<__nv_bfloat16, 2, true>("
    "__nv_bfloat16 const*)": "LayerNorm",
    "void mt::kernels::(anonymous namespace)::StreamingForwardKernel<__nv_bfloat16, 4>(int)":
        "LayerNorm",
    "void mt::kernels::(anonymous namespace)::FinishKernel<__nv_bfloat16>(float const*, int, "
    "long, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*)": "LayerNorm",
    "void mt::kernels::(anonymous namespace)::FinishKernel<__nv_bfloat16>(int const*, float "
    "const*, __nv_bfloat16*, long, long, long)": "embedding",
    "void mt::kernels::(anonymous namespace)::PrepareKeysKernel(int const*, int*, long)":
        "embedding",
    "void mt::kernels::(anonymous namespace)::AdamWKernel<__nv_bfloat16, __nv_bfloat16>(int)":
        "optimizer",
    "void mt::kernels::(anonymous namespace)::SumOfSquaresKernel<__nv_bfloat16>(int)":
        "optimizer",
    "void mt::kernels::(anonymous namespace)::FinishSumKernel(float const*, int)": "optimizer",
    "void mt::kernels::(anonymous namespace)::ChunkSumKernel<__nv_bfloat16>(int)":
        "bias gradients",
    "void mt::kernels::(anonymous namespace)::FinishColumnsKernel<__nv_bfloat16>(int)":
        "bias gradients",
    "void mt::kernels::(anonymous namespace)::QkvGradGatherKernel<__nv_bfloat16>(int)":
        "QKV gradient's gather",
    "void mt::kernels::(anonymous namespace)::FusedCrossEntropyKernel<__nv_bfloat16>(int)":
        "cross entropy",
    # the peer's (torch.compile, cuBLAS, fused AdamW, flash or cuDNN attention)
    "triton_per_fused_add_native_layer_norm_native_layer_norm_backward_7": "LayerNorm",
    "triton_red_fused__log_softmax__to_copy_nll_loss_forward_3": "cross entropy",
    "triton_poi_fused_embedding_dense_backward_0": "embedding",
    "triton_poi_fused_gelu_gelu_backward_view_12": "element-wise (Triton)",
    "triton_red_fused_sum_4": "element-wise (Triton)",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>":
        "optimizer",
    "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float>(int)": "optimizer",
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_params>":
        "attention",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": "other",
}


def x(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


# Two steps of ours (us): a GEMM 100 + 60 (the second overlaps a LayerNorm kernel [150, 170)),
# a memset 2, attention 40; busy: [0,100) + [100,170) + [200,202) + [210,250) = 212.
OURS = [
    x("kernel", "nvjet_a", 0, 100),
    x("kernel", "nvjet_a", 100, 60),
    x("kernel", "void mt::kernels::(anonymous namespace)::StagedBackwardKernel<float>(int)", 150,
      20),
    x("gpu_memset", "Memset (Device)", 200, 2),
    x("kernel", "cudnn_sdpa_sm90_flash_fprop", 210, 40),
    x("cpu_op", "aten::mm", 0, 500),  # not a GPU activity
]
# One step of the peer: a GEMM 90, LayerNorm 30 (Triton), attention 50, back to back from 0.
PEER = [
    x("kernel", "sm90_xmma_gemm_bf16", 0, 90),
    x("kernel", "triton_per_fused_native_layer_norm_2", 90, 30),
    x("kernel", "pytorch_flash::flash_fwd_kernel", 120, 50),
]


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = kernel_kinds.main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


class KindTest(unittest.TestCase):
    def test_names_of_both_trainers(self):
        for name, kind in NAMES.items():
            self.assertEqual(kernel_kinds.kind_of(name), kind, name)

    def test_memsets_and_copies_by_category(self):
        self.assertEqual(kernel_kinds.kind_of("Memset (Device)", "gpu_memset"), "memset and copy")
        self.assertEqual(kernel_kinds.kind_of("Memcpy DtoD", "gpu_memcpy"), "memset and copy")


class SummaryTest(unittest.TestCase):
    def test_per_step_sums(self):
        s = kernel_kinds.summarize(OURS, 2)
        self.assertAlmostEqual(s["busy_ms"], 0.212 / 2)
        self.assertAlmostEqual(s["sum_ms"], 0.222 / 2)
        self.assertAlmostEqual(s["kinds"]["GEMM"], 0.080)
        self.assertAlmostEqual(s["kinds"]["LayerNorm"], 0.010)
        self.assertAlmostEqual(s["kinds"]["memset and copy"], 0.001)
        self.assertAlmostEqual(s["kinds"]["attention"], 0.020)
        self.assertEqual(s["kernels"]["GEMM"], [("nvjet_a", 0.080, 1.0)])


class MainTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.ours = os.path.join(self.dir.name, "ours.json")
        self.peer = os.path.join(self.dir.name, "peer.json")
        with open(self.ours, "w") as f:
            json.dump({"traceEvents": OURS}, f)
        with open(self.peer, "w") as f:
            json.dump(PEER, f)  # a bare list of events is a trace too

    def tearDown(self):
        self.dir.cleanup()

    def test_side_by_side_text(self):
        rc, out, _ = run([self.ours + ":2", self.peer])
        self.assertEqual(rc, 0)
        lines = out.splitlines()
        gemm = next(l for l in lines if l.startswith("GEMM"))
        # ours 0.080 ms a step (72.1% of 0.111), the peer's 0.090 (52.9% of 0.170): +0.010.
        self.assertEqual(gemm.split(), ["GEMM", "0.080", "72.1%", "0.090", "52.9%", "+0.010"])
        busy = next(l for l in lines if l.startswith("GPU busy"))
        self.assertEqual(busy.split()[2:], ["0.106", "0.170", "+0.064"])
        self.assertIn("== peer: the top 8 kernels of each kind (ms per step, calls per step) ==",
                      lines)

    def test_json(self):
        rc, out, _ = run([self.ours + ":2", self.peer, "-o", "json", "--labels", "a,b"])
        self.assertEqual(rc, 0)
        data = json.loads(out)
        self.assertAlmostEqual(data["b"]["kinds"]["attention"], 0.050)
        self.assertAlmostEqual(data["a"]["kinds"]["attention"], 0.020)

    def test_bad_usage_and_bad_files(self):
        self.assertEqual(run([self.ours, self.peer, self.peer])[0], 2)
        self.assertEqual(run([self.ours, "--top", "0"])[0], 2)
        self.assertEqual(run([self.ours + ":0"])[0], 2)
        rc, _, err = run([os.path.join(self.dir.name, "missing.json")])
        self.assertEqual(rc, 2)
        self.assertIn("missing.json", err)
        bad = os.path.join(self.dir.name, "bad.json")
        with open(bad, "w") as f:
            json.dump({"nothing": 1}, f)
        rc, _, err = run([bad])
        self.assertEqual(rc, 2)
        self.assertIn("no traceEvents", err)


if __name__ == "__main__":
    unittest.main()
