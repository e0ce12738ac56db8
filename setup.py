from setuptools import find_packages, setup

setup(
    name="graphfuser",
    version="0.1.0",
    description="A TorchScript-style graph fuser for PyTorch: profiled, guarded, generated CUDA and C++ kernels",
    packages=find_packages(include=["graphfuser", "graphfuser.*"]),
    package_data={"graphfuser": ["../configs/*.yaml"]},
    python_requires=">=3.9",
    install_requires=["torch>=2.4", "pyyaml", "rich", "numpy"],
    extras_require={
        "cuda": ["cuda-bindings", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime"],
        "test": ["pytest", "pytest-xdist", "hypothesis", "import-linter"],
    },
)
