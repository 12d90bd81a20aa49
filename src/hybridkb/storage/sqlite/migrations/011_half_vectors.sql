-- Item vectors are kept at half precision (storage/codec.py: `stored`): the vector table's
-- float32 blobs become float16 blobs, half the bytes (at 100k 384-d vectors, 164 -> 82 MB of
-- the file). The conversion is numpy's, so it is Python's: driver.py runs
-- `tables.half_vectors` right after this file, in the same transaction. The derived vector
-- base of the float32 values is of an older format and is built again from the table.
SELECT 1;
