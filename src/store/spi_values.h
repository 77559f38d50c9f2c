/*-------------------------------------------------------------------------
 *
 * spi_values.h
 *      SPI result columns and arrays as C values (spi_values.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_SPI_VALUES_H
#define NOTIF_SPI_VALUES_H

#include "datatype/timestamp.h"

extern Datum spi_col(int row, int col, bool *isnull);
extern char *spi_col_text(int row, int c, MemoryContext cxt);
extern int64 spi_col_int(int row, int c);		/* 0 for NULL; int4 or int8 */
extern TimestampTz spi_col_timestamptz(int row, int c);	/* 0 for NULL */
extern Datum spi_array_of(Datum *elems, bool *nulls, int n, Oid elemtype);
extern Datum spi_int8_array_of(const int64 *v, int n);
extern int64 *spi_col_int8_array(int row, int c, int *n);
extern char **spi_col_text_array(int row, int c, MemoryContext cxt, int *n);

#endif
