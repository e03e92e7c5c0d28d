"""Writing small Hudi tables for demos and tests (Hudi's ``HoodieJavaWriteClient``, in miniature).

Not on any service path: the daemon and the executors never import it.
"""

from hoodied.hoodie.demo.demo_table import create_demo_table
from hoodied.hoodie.demo.writer import TableSpec, TableWriter, create_table

__all__ = ["TableSpec", "TableWriter", "create_demo_table", "create_table"]
