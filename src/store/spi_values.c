/*-------------------------------------------------------------------------
 *
 * spi_values.c
 *      Small conversions between SPI and C values for job_sql.c: a column
 *      of the last result (SPI_tuptable) as a Datum, a string, an integer or
 *      a timestamp, and a one-dimensional array built from Datums.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "store/spi_values.h"

/* column c (from 1) of row of the last result */
Datum
spi_col(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

char *
spi_col_text(int row, int c, MemoryContext cxt)
{
	bool		isnull;
	Datum		d = spi_col(row, c, &isnull);

	if (isnull)
		return NULL;
	return MemoryContextStrdup(cxt, TextDatumGetCString(d));
}

int64
spi_col_int(int row, int c)
{
	bool		isnull;
	Datum		d = spi_col(row, c, &isnull);

	if (isnull)
		return 0;
	switch (SPI_gettypeid(SPI_tuptable->tupdesc, c))
	{
		case INT4OID:
			return DatumGetInt32(d);
		default:
			return DatumGetInt64(d);
	}
}

/* a timestamptz column; 0 for NULL */
TimestampTz
spi_col_timestamptz(int row, int c)
{
	bool		isnull;
	Datum		d = spi_col(row, c, &isnull);

	return isnull ? 0 : DatumGetTimestampTz(d);
}

/* a one-dimensional array (lower bound 1) of n Datums of elemtype */
Datum
spi_array_of(Datum *elems, bool *nulls, int n, Oid elemtype)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs,
											  elemtype, typlen, typbyval, typalign));
}

/* a bigint[] column without NULLs, as a palloc'd array of *n values */
int64 *
spi_col_int8_array(int row, int c, int *n)
{
	bool		isnull;
	Datum		d = spi_col(row, c, &isnull);
	Datum	   *elems;
	int64	   *out;
	int			i;

	*n = 0;
	if (isnull)
		return NULL;
	deconstruct_array(DatumGetArrayTypeP(d), INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &elems, NULL, n);
	out = palloc(sizeof(int64) * Max(*n, 1));
	for (i = 0; i < *n; i++)
		out[i] = DatumGetInt64(elems[i]);
	return out;
}

/* An int8[] of n values, as a statement's parameter. */
Datum
spi_int8_array_of(const int64 *v, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		elems[i] = Int64GetDatum(v[i]);
	return spi_array_of(elems, NULL, n, INT8OID);
}

/* A text[] column's elements (no NULLs, by CHECK), allocated in cxt; NULL for NULL. */
char	  **
spi_col_text_array(int row, int c, MemoryContext cxt, int *n)
{
	bool		isnull;
	Datum		d = spi_col(row, c, &isnull);
	Datum	   *elems;
	bool	   *nulls;
	char	  **out;
	int			i;

	*n = 0;
	if (isnull)
		return NULL;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, n);
	out = MemoryContextAlloc(cxt, sizeof(char *) * Max(*n, 1));
	for (i = 0; i < *n; i++)
		out[i] = nulls[i] ? MemoryContextStrdup(cxt, "") :
			MemoryContextStrdup(cxt, TextDatumGetCString(elems[i]));
	return out;
}
