/*
 * Apache Iceberg's REST Compatibility Kit, with the one switch it does not read from the catalog's
 * properties: CatalogTests.supportsNestedNamespaces() is false in the kit and the kit does not
 * override it, so its nested-namespace tests (testListNestedNamespaces,
 * testDropNamespaceWithNestedNamespace) never run against a server. This class is the kit's
 * own RESTCompatibilityKitCatalogTests with that answer true, and with the kit's purge of its
 * test namespaces (RCKUtils, before each test) extended to the one those two tests use,
 * `parent`, which is not among the kit's: testListNestedNamespaces leaves it behind, and
 * testDropNamespaceWithNestedNamespace expects it absent. The test
 * (tests/metaservice/catalog/test_rest_compatibility_kit.py) compiles it against the kit's
 * jars and runs those two tests of it before the kit's suite, in a JVM of their own.
 */
package org.apache.iceberg.rest;

import org.apache.iceberg.catalog.Namespace;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

public class RESTCompatibilityKitNestedNamespacesTests extends RESTCompatibilityKitCatalogTests {
  private static final Namespace PARENT = Namespace.of("parent");

  @Override
  protected boolean supportsNestedNamespaces() {
    return true;
  }

  @BeforeEach
  void purgeParentBefore() {
    purgeParent();
  }

  @AfterEach
  void purgeParentAfter() {
    purgeParent();
  }

  private void purgeParent() {
    RESTCatalog catalog = catalog();
    if (catalog.namespaceExists(PARENT)) {
      catalog.listNamespaces(PARENT).forEach(catalog::dropNamespace);
      catalog.dropNamespace(PARENT);
    }
  }
}
