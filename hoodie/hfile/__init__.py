"""HFiles (HBase's format, as Hudi's metadata table writes it): ``HFileReader`` and ``HFileWriter``.

Hudi's ``HFileReaderImpl`` and ``HFileWriterImpl`` (``hudi-io``); block-level helpers stay in
``hoodie.hfile.reader`` and ``hoodie.hfile.writer``.
"""

from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.hfile.writer import HFileWriter

__all__ = ["HFileReader", "HFileWriter"]
