SELECT EXISTS (
    SELECT 1 FROM pg_attribute
    WHERE attrelid = to_regclass(quote_ident(%(schema)s) || '.' || quote_ident(%(table)s))
      AND attname = %(column)s AND NOT attisdropped
) AS present
