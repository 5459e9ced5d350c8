from setuptools import find_packages, setup

setup(
    name="neural-odes-reproduction",
    version="0.1.0",
    description="Neural ODEs (Chen et al. 2018) reproduced on scipy's ODE solvers, autograd and "
                "TensorFlow: a differentiable odeint with the adjoint method, and the paper's "
                "experiments.",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["odeint_autograd", "gpu_dynamics", "reproduce"]),
    install_requires=["numpy>=1.26", "scipy>=1.16,<1.17", "autograd>=1.7", "threadpoolctl>=3.1"],
    extras_require={
        # TensorFlow for gpu_dynamics and the MNIST experiment; on a GPU machine install the
        # "tf-gpu" extra instead (same code, TensorFlow then places the work on the GPU).
        "tf": ["tensorflow-cpu>=2.16"],
        "tf-gpu": ["tensorflow[and-cuda]>=2.16"],
        "reproduce": ["tqdm>=4.60", "matplotlib>=3.7"],
        "bench": ["torch==2.13.0", "torchdiffeq>=0.2.3"],
        # Ray for --executor ray (python -m reproduce NAME --executor ray; docs/cluster.md)
        "cluster": ["ray[default]>=2.9"],
        # ray's core (about 7 s and 265 MB to install) so that the tests of the ray executor run
        "dev": ["pytest>=7", "pytest-timeout>=2", "ray>=2.9"],
    },
)
