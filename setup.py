"""The one compiled part: the archive's recorder (`data_plane/storage/_recorder.c`).

Everything else is in pyproject.toml. The extension is optional: where no C compiler is present,
the install goes on and the broker uses the Python recorder, which does the same thing
(`data_plane.storage.parquet_archive`); `runbroker` logs which one it runs.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "data_plane.storage._recorder",
            ["data_plane/storage/_recorder.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"],
        )
    ]
)
