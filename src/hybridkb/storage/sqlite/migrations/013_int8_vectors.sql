-- Item vectors are kept as one signed byte per component and a float32 scale per row
-- (storage/codec.py: `stored`): the vector table's float16 blobs become blobs of dim + 4
-- bytes, about half (at 1M 384-d vectors, 768 -> 388 MB of the file), and pending
-- re-embedding vectors with them. The conversion is numpy's, so it is Python's: driver.py
-- runs `tables.int8_vectors` right after this file, in the same transaction. The vector
-- base built from the float16 values holds the same int8 codes (its scales differ a little:
-- its products only order rows, the exact pass reads this table) and stays until its next
-- build; the freed pages go back to the file system at the next `optimize()` (a VACUUM).
SELECT 1;
