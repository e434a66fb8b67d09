package affinity.spark;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("affinity")} on the JVM: Spark's {@code DataSourceRegister} lookup finds this
 * class before any Python data source of the name, so it serves both: group-mode writes in the
 * executor JVM ({@link AffinityTable}), the rest through the Python data source {@code affinity}.
 */
public final class AffinityProvider implements TableProvider, DataSourceRegister {
  /** The format name, shared with the Python data source. */
  public static final String NAME = "affinity";
  /** Options only a sink takes: a schema inference that fails on them is a streaming write's. */
  private static final List<String> SINK_ONLY = Arrays.asList("key", "maxbatchrows", "maxbatchbytes",
      "acktimeout", "writer");

  private PythonDataSourceV2 python;

  /** Spark instantiates the provider by its no-argument constructor. */
  public AffinityProvider() {}

  @Override
  public String shortName() {
    return NAME;
  }

  /** The Python data source {@code affinity} of the active session. */
  PythonDataSourceV2 python() {
    if (python == null) {
      PythonDataSourceV2 source = new PythonDataSourceV2();
      source.setShortName(NAME);
      python = source;
    }
    return python;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    try {
      return python().inferSchema(options);
    } catch (RuntimeException error) {
      // Spark asks a streaming sink for its schema with the sink's options, which the source
      // refuses; a write uses the query's own schema.
      for (String name : options.keySet()) {
        if (SINK_ONLY.contains(name.toLowerCase(Locale.ROOT))) {
          return new StructType();
        }
      }
      throw error;
    }
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new AffinityTable(schema, partitioning, properties, this);
  }
}
