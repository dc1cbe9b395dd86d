"""Installs tunas_search: the library, the search spaces and the bin/ tools."""

import os

import setuptools

_HERE = os.path.dirname(os.path.abspath(__file__))
_TF = '2.15.1'  # The last TensorFlow release with tf.estimator and TPUEstimator.


def _readme():
  with open(os.path.join(_HERE, 'README.md'), encoding='utf-8') as f:
    return f.read()


setuptools.setup(
    name='tunas_search',
    version='0.1.0',
    description='TuNAS-style neural architecture search for mobile image '
                'classifiers on Cloud TPU and CPU.',
    long_description=_readme(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    # TensorFlow 2.15 supports Python 3.9-3.11 (Cloud TPU VM images ship
    # 3.10); `make test` checks the minimum statically with vermin.
    python_requires='>=3.9,<3.12',
    packages=setuptools.find_packages(include=['tunas_search', 'tunas_search.*',
                                               'search_spaces',
                                               'search_spaces.*'])
    + ['tunas_search_cli'],
    # The command-line tools live in bin/ and are installed under a name of
    # this project: a top-level `bin` package would clash with others'.
    package_dir={'tunas_search_cli': 'bin'},
    package_data={
        'tunas_search': ['data/*.npz', 'data/*.md', 'data/LICENSE*',
                         'cost_models/*.npz', 'cost_models/*.md',
                         'cost_models/LICENSE*'],
    },
    # TensorFlow itself is an extra so that TPU and GPU users are not forced
    # onto the CPU-only wheel: pick exactly one of [cpu], [tf], [gpu] or [tpu].
    install_requires=[
        'absl-py>=1.4',
        'numpy>=1.26,<2',
        'protobuf>=3.20.3,<5',
        'tensorflow-datasets==4.9.10',
        # tensorflow-datasets 4.9.10 fails to import with newer metadata.
        'tensorflow-metadata==1.16.1',
    ],
    extras_require={
        'cpu': [f'tensorflow-cpu=={_TF}'],
        'tf': [f'tensorflow=={_TF}'],
        # TensorFlow's own CUDA 12.2 / cuDNN 8.9 wheels from the package
        # index, so a Linux GPU machine needs only an NVIDIA driver.
        'gpu': [f'tensorflow[and-cuda]=={_TF}'],
        # TF 2.15 ships its own Cloud TPU client; it only needs these two.
        # The separate `cloud-tpu-client` package is deliberately not used: it
        # pins protobuf to the slow pure-Python 3.20 (see README).
        'tpu': [f'tensorflow=={_TF}', 'google-api-python-client>=2',
                'oauth2client>=4.1'],
        'plot': ['matplotlib>=3.7,<3.10'],
        'test': ['pytest>=7', 'pytest-xdist>=3', 'vermin>=1.6'],
    },
    entry_points={
        'console_scripts': [
            'tunas-search=tunas_search_cli.search:run',
            'tunas-describe-arch=tunas_search_cli.describe_arch:run',
            'tunas-analyze-search=tunas_search_cli.analyze_search:run',
            'tunas-train-eval=tunas_search_cli.train_eval:run',
            'tunas-export-model=tunas_search_cli.export_model:run',
            'tunas-sample-random=tunas_search_cli.sample_random:run',
            'tunas-calibrate-latency=tunas_search_cli.calibrate_latency:run',
            'tunas-evaluate-search=tunas_search_cli.evaluate_search:run',
        ],
    },
    classifiers=[
        'Programming Language :: Python :: 3.9',
        'Programming Language :: Python :: 3.10',
        'Programming Language :: Python :: 3.11',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
