#!/usr/bin/env python3
"""scripts/gpu_build.sh's choice between the carried .prebuilt/ binaries (scripts/gpu_prebuild.sh)
and a build on the GPU machine, on a small fake tree: the pack is used only when its stamp
(scripts/source_stamp.sh) is the tree's, it holds every target asked for and its lmfuse runs;
otherwise the script says why and configures a build (which fails here: the fake CMakeLists.txt is
not CMake). Needs bash, tar and xz; prints SKIP and exits 77 (ctest: skipped) without them.

Env: LMFUSE_SOURCE_DIR (repository root).
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = pathlib.Path(os.environ.get("LMFUSE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
if not all(shutil.which(t) for t in ("bash", "tar", "xz", "sha256sum")):
    print("SKIP: test_gpu_build needs bash, tar, xz and sha256sum")
    sys.exit(77)


class GpuBuild(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        (self.root / "scripts").mkdir()
        for s in ("gpu_build.sh", "source_stamp.sh"):
            shutil.copy(SRC / "scripts" / s, self.root / "scripts" / s)
        for d in ("cmake", "src/backend/cuda", "include", "tools", "tests", "bench"):
            (self.root / d).mkdir(parents=True)
        (self.root / "CMakeLists.txt").write_text("this is not CMake\n")
        (self.root / "src/backend/cuda/gemv.cuh").write_text("// kernel\n")
        (self.root / "src/backend/cuda/gemv.notes.txt").write_text("not a source\n")
        self.pack({"lmfuse": 0, "cuda_op_tests": 0})

    def tearDown(self):
        self.tmp.cleanup()

    def pack(self, bins, defs="", name=".prebuilt"):
        """A pack (default .prebuilt/) of fake binaries (shell scripts exiting with the given code),
        stamped with the tree as it is now, built with the given CUDA defines."""
        stage = self.root / "stage"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        for b, code in bins.items():
            (stage / b).write_text(f"#!/bin/sh\nexit {code}\n")
            (stage / b).chmod(0o755)
        p = self.root / name
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir()
        subprocess.run(["tar", "-C", str(stage), "-cJf", str(p / "bin.tar.xz"), *bins], check=True)
        (p / "targets").write_text("".join(f"{b}\n" for b in bins))
        stamp = subprocess.run(["bash", "scripts/source_stamp.sh"], cwd=self.root, capture_output=True, text=True, check=True)
        (p / "stamp").write_text(stamp.stdout)
        (p / "defs").write_text(defs + "\n")
        shutil.rmtree(stage)

    def build(self, *targets, **env_extra):
        env = dict(os.environ, OUT=str(self.root / "out"), **env_extra)
        r = subprocess.run(["bash", "scripts/gpu_build.sh", "bdir", *targets], cwd=self.root, env=env,
                           capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout.splitlines()[0] if r.stdout else ""

    def test_uses_the_pack_of_this_tree(self):
        rc, first = self.build("lmfuse", "cuda_op_tests")
        self.assertEqual(rc, 0, first)
        self.assertTrue(first.startswith("build: prebuilt binaries of tree"), first)
        self.assertTrue(os.access(self.root / "bdir/lmfuse", os.X_OK))
        self.assertTrue((self.root / "bdir/cuda_op_tests").exists())
        self.assertFalse((self.root / "bdir.unpack").exists())

    def test_a_changed_source_builds_instead(self):
        (self.root / "src/backend/cuda/gemv.cuh").write_text("// kernel, edited after packing\n")
        rc, first = self.build("lmfuse")
        self.assertNotEqual(rc, 0)  # the fake tree does not configure
        self.assertIn("build: compiling here (packed from another tree", first)
        self.assertFalse((self.root / "bdir/lmfuse").exists())

    def test_a_file_outside_the_sources_keeps_the_pack(self):
        (self.root / "src/backend/cuda/gemv.notes.txt").write_text("edited\n")
        rc, first = self.build("lmfuse")
        self.assertEqual(rc, 0, first)
        self.assertTrue(first.startswith("build: prebuilt binaries"), first)

    def test_a_target_not_packed_builds_instead(self):
        rc, first = self.build("lmfuse", "cuda_bench_gemv")
        self.assertNotEqual(rc, 0)
        self.assertEqual(first, "build: compiling here (cuda_bench_gemv not packed)")
        self.assertFalse((self.root / "bdir/lmfuse").exists())

    def test_a_binary_that_does_not_run_builds_instead(self):
        self.pack({"lmfuse": 1, "cuda_op_tests": 0})
        rc, first = self.build("cuda_op_tests")
        self.assertNotEqual(rc, 0)
        self.assertEqual(first, "build: compiling here (lmfuse --help failed)")
        self.assertFalse((self.root / "bdir.unpack").exists())

    def test_an_experiment_pack_needs_its_defines(self):
        self.pack({"lmfuse": 0}, defs="-DLMFUSE_X=1", name=".prebuilt-x")
        rc, first = self.build("lmfuse", PACK=".prebuilt-x", GPU_BUILD_DEFS="-DLMFUSE_X=1")
        self.assertEqual(rc, 0, first)
        self.assertEqual(first.split(" (")[0], "build: prebuilt binaries of tree " +
                         (self.root / ".prebuilt-x/stamp").read_text().strip() + " with -DLMFUSE_X=1")
        rc, first = self.build("lmfuse", PACK=".prebuilt-x")
        self.assertNotEqual(rc, 0)
        self.assertEqual(first, "build: compiling here (packed with other defines (-DLMFUSE_X=1))")
        rc, first = self.build("lmfuse", GPU_BUILD_DEFS="-DLMFUSE_X=1")  # the default pack has none
        self.assertNotEqual(rc, 0)
        self.assertEqual(first, "build: compiling here (packed with other defines ())")

    def test_no_pack_builds(self):
        shutil.rmtree(self.root / ".prebuilt")
        rc, first = self.build("lmfuse")
        self.assertNotEqual(rc, 0)
        self.assertEqual(first, "build: compiling here (no .prebuilt/ carried)")


if __name__ == "__main__":
    unittest.main()
